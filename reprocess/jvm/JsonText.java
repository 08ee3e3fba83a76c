package reprocess.json;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import org.apache.spark.sql.api.java.UDF2;

/**
 * Whether PostgreSQL's json (or, with the flag, jsonb) input takes a staged text (reprocess.formats.contract,
 * DESIGN "check in Spark what the COPY would refuse, before the dedupe"): null when it does, else the reason.
 * Spark's own parse_json is no such check: it takes text after the value and refuses duplicate keys,
 * which PostgreSQL does the other way round.
 *
 * PostgreSQL's json is RFC 8259 JSON text: one value, JSON's whitespace only (space, tab, newline,
 * carriage return), no leading zeros, NaN or comments; duplicate keys and any nesting are taken. jsonb
 * also refuses the escape of NUL and a lone surrogate escape (json keeps both as written). Arguments:
 * the text (null gives null), true for jsonb.
 */
public final class JsonText implements UDF2<String, Boolean, String> {
  private static final JsonFactory FACTORY = JsonFactory.builder()
      .streamReadConstraints(StreamReadConstraints.builder()
          .maxNestingDepth(Integer.MAX_VALUE)
          .maxNumberLength(Integer.MAX_VALUE)
          .maxStringLength(Integer.MAX_VALUE)
          .maxNameLength(Integer.MAX_VALUE)
          .maxDocumentLength(-1)
          .build())
      .build();

  @Override
  public String call(String text, Boolean jsonb) throws Exception {
    if (text == null) return null;
    boolean strings = Boolean.TRUE.equals(jsonb);
    try (JsonParser p = FACTORY.createParser(text)) {
      JsonToken t = p.nextToken();
      if (t == null) return "no JSON value";
      int depth = 0;
      do {
        if (t == JsonToken.START_OBJECT || t == JsonToken.START_ARRAY) depth++;
        else if (t == JsonToken.END_OBJECT || t == JsonToken.END_ARRAY) depth--;
        else if (strings && (t == JsonToken.VALUE_STRING || t == JsonToken.FIELD_NAME)) {
          String reason = jsonbRefuses(t == JsonToken.FIELD_NAME ? p.currentName() : p.getText());
          if (reason != null) return reason;
        }
      } while (depth > 0 && (t = p.nextToken()) != null);
      if (depth > 0) return "the JSON text ends inside a value";
      if (p.nextToken() != null) return "text after the JSON value";
      return null;
    } catch (JsonProcessingException e) {
      String message = e.getOriginalMessage();
      return message == null ? "malformed JSON" : message.split("\n", 2)[0];
    }
  }

  /** A decoded string jsonb cannot hold: NUL (sent as its escape), a surrogate not in a pair. */
  private static String jsonbRefuses(String s) {
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c == 0) return "the escape \\u0000, which jsonb cannot hold";
      if (Character.isHighSurrogate(c) && i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1))) {
        i++;
      } else if (Character.isSurrogate(c)) {
        return "a lone surrogate escape, which jsonb cannot hold";
      }
    }
    return null;
  }
}
