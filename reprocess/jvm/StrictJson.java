package reprocess.json;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadFeature;
import java.io.ByteArrayOutputStream;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF3;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * The JSON decoder's one parse per record (reprocess.formats.json, docs/performance.md "one parse per
 * record III"): one strict Jackson pass over a record's bytes gives the spec's fields as the text
 * Spark's from_json gives a string field, and whether the record breaks a strict rule (a duplicate key
 * at any depth, a lone surrogate escape, text after the object), which from_json alone would let by.
 * The decoder names the reason with today's Spark SQL, for the refused records only.
 *
 * Arguments: the value's bytes; the output struct as Spark DDL (the value's fields nested by path as
 * STRING, then _corrupt_record, _err, one _k<n> per text, numeric or json field, then one _f<n> per
 * field whose role ends in !, each in the roles' order); the roles "path=t;path=n!;..." (t: a text
 * column, n: a numeric column, j: a json or jsonb column, z: timestamptz, h/i/l: smallint, integer,
 * bigint, s: any other; a role ending in ! asks for the field's fast slot). Output: the fields, or
 * _corrupt_record when from_json would give a corrupt record, or _err = dup | surrogate | after. _k<n>
 * is, for a text field, OBJECT, ARRAY or NUMBER (a number with a fraction or an exponent, which Spark
 * would rewrite), else null; for a numeric field the kind a variant gives it (STRING, BIGINT,
 * DECIMAL(p,s), DOUBLE, BOOLEAN, OBJECT...); for a json field STRING, VOID or JSON (then the field is
 * the value's JSON text as written). _f<n> is the field's typed value when FastValues reads it (true
 * for a numeric's text that is its exact value; micros since the epoch for a timestamptz; the
 * integer), else null.
 * Compiled into the package as reprocess/jvm/reprocess-json.jar by `make install` and by the wheel's
 * build backend (build_backend/json_jar.py); never committed as a jar.
 */
public final class StrictJson implements UDF3<byte[], String, String, Row> {
  private static final JsonFactory FACTORY = JsonFactory.builder()
      .enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION).build();

  /** The output layout for one (schema, roles) pair, parsed once per task. */
  private static final class Layout {
    final StructType top;
    final int nFields;       // fields read from the value (before _corrupt_record)
    final Node root;
    final int corrupt, err, k0;
    final Map<String, Character> roles = new HashMap<>();
    final Map<String, Integer> kindSlot = new HashMap<>();
    final Map<String, Integer> fastSlot = new HashMap<>();

    Layout(String ddl, String roleText) {
      top = (StructType) DataType.fromDDL(ddl);
      corrupt = top.fieldIndex("_corrupt_record");
      err = top.fieldIndex("_err");
      k0 = err + 1;
      nFields = corrupt;
      int k = 0;
      for (String item : roleText.split(";")) {
        if (item.isEmpty()) continue;
        int eq = item.lastIndexOf('=');
        String path = item.substring(0, eq);
        char role = item.charAt(eq + 1);
        roles.put(path, role);
        if (KIND_ROLES.indexOf(role) >= 0) kindSlot.put(path, k0 + k++);
      }
      for (String item : roleText.split(";")) {
        if (item.endsWith("!")) fastSlot.put(item.substring(0, item.lastIndexOf('=')), k0 + k++);
      }
      root = new Node(top, nFields, "");
    }
  }

  /** A struct of the schema: its field names to their index and child struct. */
  private static final class Node {
    final Map<String, Integer> index = new HashMap<>();
    final Node[] children;
    final String[] paths;
    final int size;

    Node(StructType t, int n, String prefix) {
      size = n;
      children = new Node[n];
      paths = new String[n];
      StructField[] f = t.fields();
      for (int i = 0; i < n; i++) {
        index.put(f[i].name(), i);
        paths[i] = prefix + f[i].name();
        if (f[i].dataType() instanceof StructType s) {
          children[i] = new Node(s, s.fields().length, paths[i] + ".");
        }
      }
    }
  }

  /** The roles with a kind slot (_k<n>). */
  private static final String KIND_ROLES = "tnj";

  /** The reason of a field the spec reads as an object (a path's parent) holding another value. */
  private static final String NOT_AN_OBJECT = "not an object where the spec reads fields";

  private static final class StrictFailure extends Exception {
    final String reason;
    StrictFailure(String reason) { super(reason, null, false, false); this.reason = reason; }
  }

  private transient String cachedDdl, cachedRoles;
  private transient Layout layout;
  private transient ByteArrayOutputStream buffer;
  private transient byte[] current;
  private transient Object[] row;

  @Override
  public Row call(byte[] value, String ddl, String roleText) throws Exception {
    if (value == null) return null;
    if (layout == null || !ddl.equals(cachedDdl) || !roleText.equals(cachedRoles)) {
      layout = new Layout(ddl, roleText);
      cachedDdl = ddl;
      cachedRoles = roleText;
      buffer = new ByteArrayOutputStream(256);
    }
    Object[] out = new Object[layout.top.fields().length];
    current = value;
    row = out;
    if (notUtf8Start(value)) {  // Jackson would guess UTF-16/32 or skip a BOM; the record is UTF-8 text
      out[layout.corrupt] = "not UTF-8 JSON";
      return RowFactory.create(out);
    }
    boolean checkStrings = mayHoldSurrogateEscape(value);
    boolean ended = false;
    try (JsonParser p = FACTORY.createParser(value)) {
      JsonToken t = p.nextToken();
      if (t != JsonToken.START_OBJECT) {
        out[layout.corrupt] = "not a JSON object";
        return RowFactory.create(out);
      }
      Object[] fields = new Object[layout.nFields];
      readObject(p, layout.root, fields, out, checkStrings);
      ended = true;
      if (p.nextToken() != null) throw new StrictFailure("after");
      System.arraycopy(fields, 0, out, 0, layout.nFields);
    } catch (StrictFailure e) {
      clearFields(out);
      out[e.reason.equals(NOT_AN_OBJECT) ? layout.corrupt : layout.err] = e.reason;
    } catch (java.io.CharConversionException e) {
      clearFields(out);
      out[layout.corrupt] = "malformed";
    } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
      clearFields(out);
      String m = e.getOriginalMessage();
      if (ended) out[layout.err] = "after";
      else if (m != null && m.startsWith("Duplicate field")) out[layout.err] = "dup";
      else out[layout.corrupt] = "malformed";
    }
    return RowFactory.create(out);
  }

  private void clearFields(Object[] out) {
    for (int i = 0; i < layout.nFields; i++) out[i] = null;
    for (int i = layout.k0; i < out.length; i++) out[i] = null;
  }

  /** Reads an object's fields (the parser is at its START_OBJECT) into ``fields``. */
  private void readObject(JsonParser p, Node node, Object[] fields, Object[] out, boolean checkStrings)
      throws Exception {
    JsonToken t;
    while ((t = p.nextToken()) == JsonToken.FIELD_NAME) {
      String name = p.currentName();
      if (checkStrings) checkSurrogates(name);
      JsonToken v = p.nextToken();
      Integer i = node == null ? null : node.index.get(name);
      if (i == null) {
        skip(p, v, checkStrings);
        continue;
      }
      Node child = node.children[i];
      if (child != null) {
        if (v == JsonToken.START_OBJECT) {
          Object[] sub = new Object[child.size];
          readObject(p, child, sub, out, checkStrings);
          fields[i] = RowFactory.create(sub);
        } else if (v != JsonToken.VALUE_NULL) {
          throw new StrictFailure(NOT_AN_OBJECT);  // from_json cannot read it into a struct: a corrupt record
        }
        continue;
      }
      String path = node.paths[i];
      Object text = leaf(p, v, path, out, checkStrings);
      fields[i] = text;
      Integer fast = layout.fastSlot.get(path);
      if (fast != null && text != null) out[fast] = fastValue(layout.roles.get(path), v, (String) text, path, out);
    }
    if (t != JsonToken.END_OBJECT) throw new IllegalStateException("unexpected " + t);
  }

  /** A leaf field's text as from_json renders it into a string field, its kind for a numeric one. */
  private Object leaf(JsonParser p, JsonToken v, String path, Object[] out, boolean checkStrings) throws Exception {
    char role = layout.roles.getOrDefault(path, 's');
    Integer slot = layout.kindSlot.get(path);
    if (role == 'j') return jsonLeaf(p, v, slot, checkStrings);
    if (role == 't') {
      slot = null;  // a text field's slot says only what Spark would rewrite
      Integer textSlot = layout.kindSlot.get(path);
      if (v == JsonToken.VALUE_NUMBER_FLOAT) out[textSlot] = "NUMBER";
      else if (v == JsonToken.START_OBJECT) out[textSlot] = "OBJECT";
      else if (v == JsonToken.START_ARRAY) out[textSlot] = "ARRAY";
    }
    switch (v) {
      case VALUE_STRING: {
        String s = p.getText();
        if (checkStrings) checkSurrogates(s);
        if (slot != null) out[slot] = "STRING";
        return s;
      }
      case VALUE_NULL:
        if (slot != null) out[slot] = "VOID";
        return null;
      case VALUE_TRUE:
      case VALUE_FALSE:
        if (slot != null) out[slot] = "BOOLEAN";
        return v == JsonToken.VALUE_TRUE ? "true" : "false";
      case VALUE_NUMBER_INT: {
        String s = p.getText();
        if (slot != null) {
          if (s.length() <= 18) { out[slot] = "BIGINT"; return s.startsWith("-0") ? "0" : s; }
          String k = kindOfDecimal(s);
          out[slot] = k;
          return k.equals("DOUBLE") ? Double.toString(Double.parseDouble(s)) : s;
        }
        return s.startsWith("-0") ? "0" : s;  // from_json renders -0 as 0
      }
      case VALUE_NUMBER_FLOAT: {
        String s = p.getText();
        if (slot != null) {
          // a variant holds a number with an exponent as a double (so the product refuses 1e5 in a numeric)
          String k = s.indexOf('e') >= 0 || s.indexOf('E') >= 0 ? "DOUBLE" : kindOfDecimal(s);
          out[slot] = k;
          return k.equals("DOUBLE") ? Double.toString(Double.parseDouble(s)) : variantDecimal(s).toPlainString();
        }
        return copied(p, checkStrings);
      }
      case START_OBJECT:
      case START_ARRAY: {
        if (slot != null) out[slot] = v == JsonToken.START_OBJECT ? "OBJECT" : "ARRAY";
        return copied(p, checkStrings);
      }
      default:
        throw new IllegalStateException("unexpected " + v);
    }
  }

  /** A field's typed value read here (FastValues), or null: the decoder's SQL then casts its text. */
  private Object fastValue(char role, JsonToken v, String text, String path, Object[] out) {
    switch (role) {
      case 'z': return v == JsonToken.VALUE_STRING ? FastValues.timestampMicros(text) : null;
      case 'h': return FastValues.integer(text, Short.MIN_VALUE, Short.MAX_VALUE);
      case 'i': return FastValues.integer(text, Integer.MIN_VALUE, Integer.MAX_VALUE);
      case 'l': return FastValues.integer(text, Long.MIN_VALUE, Long.MAX_VALUE);
      case 'n': {
        Object kind = out[layout.kindSlot.get(path)];
        boolean exact = "BIGINT".equals(kind) || kind instanceof String k && k.startsWith("DECIMAL")
            || "STRING".equals(kind) && FastValues.numericText(text);
        return exact ? Boolean.TRUE : null;
      }
      default: return null;
    }
  }

  /** A json/jsonb field: a string's text, null, or the value's JSON text as written (the decoder
   *  renders it as Spark renders a variant read from the record). */
  private Object jsonLeaf(JsonParser p, JsonToken v, Integer slot, boolean checkStrings) throws Exception {
    switch (v) {
      case VALUE_STRING: {
        String s = p.getText();
        if (checkStrings) checkSurrogates(s);
        out(slot, "STRING");
        return s;
      }
      case VALUE_NULL:
        out(slot, "VOID");
        return null;
      case START_OBJECT:
      case START_ARRAY: {
        int start = (int) p.currentTokenLocation().getByteOffset();
        skip(p, v, checkStrings);
        int end = (int) p.currentLocation().getByteOffset();
        out(slot, "JSON");
        return new String(current, start, end - start, StandardCharsets.UTF_8);
      }
      default:
        out(slot, "JSON");
        return p.getText();
    }
  }

  private void out(Integer slot, String kind) {
    if (slot != null) row[slot] = kind;
  }

  /** A number as a variant holds it: a decimal of up to 38 digits, trailing zeros dropped, else a double. */
  private static String kindOfDecimal(String s) {
    try {
      BigDecimal d = variantDecimal(s);
      if (d.precision() <= 38) return "DECIMAL(" + d.precision() + "," + d.scale() + ")";
    } catch (NumberFormatException | ArithmeticException e) {
      // falls to a double
    }
    return "DOUBLE";
  }

  private static BigDecimal variantDecimal(String s) {
    BigDecimal d = new BigDecimal(s).stripTrailingZeros();
    return d.scale() < 0 ? d.setScale(0) : d;
  }

  /** The current value's text as Spark's JacksonParser writes a non-string token into a string field. */
  private String copied(JsonParser p, boolean checkStrings) throws Exception {
    buffer.reset();
    try (JsonGenerator g = FACTORY.createGenerator(buffer)) {
      if (checkStrings) {
        copyChecked(p, g);
      } else {
        g.copyCurrentStructure(p);
      }
    }
    return buffer.toString(StandardCharsets.UTF_8);
  }

  private void copyChecked(JsonParser p, JsonGenerator g) throws Exception {
    int depth = 0;
    do {
      JsonToken t = p.currentToken();
      if (t == JsonToken.VALUE_STRING) checkSurrogates(p.getText());
      if (t == JsonToken.FIELD_NAME) checkSurrogates(p.currentName());
      g.copyCurrentEvent(p);
      if (t == JsonToken.START_OBJECT || t == JsonToken.START_ARRAY) depth++;
      if (t == JsonToken.END_OBJECT || t == JsonToken.END_ARRAY) depth--;
    } while (depth > 0 && p.nextToken() != null);
  }

  /** Skips a value; every token is still read, so a duplicate key anywhere is seen. */
  private static void skip(JsonParser p, JsonToken v, boolean checkStrings) throws Exception {
    if (v != JsonToken.START_OBJECT && v != JsonToken.START_ARRAY) {
      if (checkStrings && v == JsonToken.VALUE_STRING) checkSurrogates(p.getText());
      return;
    }
    int depth = 1;
    while (depth > 0) {
      JsonToken t = p.nextToken();
      if (t == JsonToken.START_OBJECT || t == JsonToken.START_ARRAY) depth++;
      else if (t == JsonToken.END_OBJECT || t == JsonToken.END_ARRAY) depth--;
      else if (checkStrings && t == JsonToken.VALUE_STRING) checkSurrogates(p.getText());
      else if (checkStrings && t == JsonToken.FIELD_NAME) checkSurrogates(p.currentName());
    }
  }

  /** A NUL among the first 4 bytes or a byte-order mark: what makes Jackson read other than UTF-8. */
  private static boolean notUtf8Start(byte[] b) {
    for (int i = 0; i < Math.min(4, b.length); i++) if (b[i] == 0) return true;
    return b.length >= 2 && ((b[0] & 0xff) == 0xef || (b[0] & 0xff) == 0xfe || (b[0] & 0xff) == 0xff);
  }

  /** True when the bytes hold a backslash-u-d escape (the only way JSON text spells a lone surrogate). */
  private static boolean mayHoldSurrogateEscape(byte[] b) {
    for (int i = 0; i + 2 < b.length; i++) {
      if (b[i] == '\\' && b[i + 1] == 'u' && (b[i + 2] == 'd' || b[i + 2] == 'D')) return true;
    }
    return false;
  }

  private static void checkSurrogates(String s) throws StrictFailure {
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (Character.isHighSurrogate(c)) {
        if (i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1))) { i++; continue; }
        throw new StrictFailure("surrogate");
      }
      if (Character.isLowSurrogate(c)) throw new StrictFailure("surrogate");
    }
  }
}
