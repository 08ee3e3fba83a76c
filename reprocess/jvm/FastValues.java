package reprocess.json;

import java.time.LocalDate;

/**
 * The typed values the JSON decoder takes from the Jackson pass instead of Spark SQL's casts (its fast
 * path; reprocess.formats.json_udf, docs/performance.md "typed values in the Jackson pass"). Each one
 * reads only a strict subset of what the cast reads, where the two agree exactly, and gives null for
 * anything else: the decoder then takes today's cast (reprocess.formats.typed.typed_sql). A null here
 * never makes a record a dead letter.
 */
final class FastValues {
  private FastValues() {}

  private static final long MICROS_PER_SECOND = 1_000_000L;
  // Days since 1970-01-01 of 0001-01-01 and of 10000-01-01: the years every part holds (1-9999).
  private static final long FIRST_DAY = -719_162L, END_DAY = 2_932_897L;

  /**
   * Microseconds since the epoch of a timestamp with a zone in the one form a producer writes it
   * (ISO 8601: YYYY-MM-DDTHH:MM:SS, 1-6 fraction digits, Z or +HH:MM/-HH:MM up to 17:59), when its UTC
   * instant falls in the years 1-9999 (what try_cast(text AS timestamp) reads in a UTC session, and
   * the decoder's year check); else null. No space, no 24:00, no leap second, no 7th fraction digit.
   */
  static Long timestampMicros(String s) {
    int n = s.length();
    if (n < 20 || n > 32 || s.charAt(4) != '-' || s.charAt(7) != '-' || s.charAt(10) != 'T'
        || s.charAt(13) != ':' || s.charAt(16) != ':') return null;
    int year = digits(s, 0, 4), month = digits(s, 5, 2), day = digits(s, 8, 2);
    int hour = digits(s, 11, 2), minute = digits(s, 14, 2), second = digits(s, 17, 2);
    if (year < 1 || month < 1 || month > 12 || day < 1 || day > 28 && day > monthDays(year, month)
        || hour < 0 || hour > 23 || minute < 0 || minute > 59 || second < 0 || second > 59) return null;
    int i = 19;
    long fraction = 0;
    if (s.charAt(i) == '.') {
      int start = ++i;
      while (i < n && i - start < 7 && isDigit(s.charAt(i))) fraction = fraction * 10 + (s.charAt(i++) - '0');
      int count = i - start;
      if (count < 1 || count > 6) return null;
      for (int k = count; k < 6; k++) fraction *= 10;
    }
    long offsetSeconds;
    if (i == n - 1 && s.charAt(i) == 'Z') {
      offsetSeconds = 0;
    } else if (i == n - 6 && (s.charAt(i) == '+' || s.charAt(i) == '-') && s.charAt(i + 3) == ':') {
      int oh = digits(s, i + 1, 2), om = digits(s, i + 4, 2);
      if (oh < 0 || oh > 17 || om < 0 || om > 59) return null;
      offsetSeconds = (s.charAt(i) == '-' ? -1 : 1) * (oh * 3600L + om * 60L);
    } else {
      return null;
    }
    long local = LocalDate.of(year, month, day).toEpochDay() * 86_400L + hour * 3600L + minute * 60L + second;
    long utc = local - offsetSeconds;
    long utcDay = Math.floorDiv(utc, 86_400L);
    if (utcDay < FIRST_DAY || utcDay >= END_DAY) return null;
    return utc * MICROS_PER_SECOND + fraction;
  }

  /**
   * The value of an integer written as JSON's integer or as a string of the same digits (an optional
   * minus, 1-18 digits: no sign, space or fraction, which try_cast also reads but is left to it), when
   * it lies in [min, max]; else null.
   */
  static Long integer(String s, long min, long max) {
    int n = s.length(), start = n > 0 && s.charAt(0) == '-' ? 1 : 0;
    if (n - start < 1 || n - start > 18) return null;
    for (int i = start; i < n; i++) if (!isDigit(s.charAt(i))) return null;
    long v = Long.parseLong(s);
    return v < min || v > max ? null : v;
  }

  /**
   * True when a JSON string is, as written, the text PostgreSQL's numeric input reads as the decoder
   * checks it (reprocess.formats.typed.NUMERIC_TEXT, at most 1000 characters): an optional sign,
   * digits with an optional point (or a point and digits), an optional exponent of 1-3 digits. The
   * decoder then stages the text itself, as today's check (on the trimmed text, which it equals) does.
   */
  static boolean numericText(String s) {
    int n = s.length(), i = 0;
    if (n == 0 || n > 1000) return false;
    if (s.charAt(i) == '+' || s.charAt(i) == '-') i++;
    int before = i;
    while (i < n && isDigit(s.charAt(i))) i++;
    boolean intDigits = i > before;
    if (i < n && s.charAt(i) == '.') {
      int after = ++i;
      while (i < n && isDigit(s.charAt(i))) i++;
      if (!intDigits && i == after) return false;
    } else if (!intDigits) {
      return false;
    }
    if (i < n && (s.charAt(i) == 'e' || s.charAt(i) == 'E')) {
      i++;
      if (i < n && (s.charAt(i) == '+' || s.charAt(i) == '-')) i++;
      int exp = i;
      while (i < n && isDigit(s.charAt(i))) i++;
      if (i == exp || i - exp > 3) return false;
    }
    return i == n;
  }

  private static int monthDays(int year, int month) {
    if (month == 2) return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28;
    return month == 4 || month == 6 || month == 9 || month == 11 ? 30 : 31;
  }

  /** The value of ``count`` ASCII digits at ``from``, or -1 when one is not a digit. */
  private static int digits(String s, int from, int count) {
    int v = 0;
    for (int i = from; i < from + count; i++) {
      char c = s.charAt(i);
      if (!isDigit(c)) return -1;
      v = v * 10 + (c - '0');
    }
    return v;
  }

  private static boolean isDigit(char c) {
    return c >= '0' && c <= '9';
  }
}
