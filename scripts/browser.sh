#!/usr/bin/env bash
# Make sure Debian's Chromium and ChromeDriver are installed (for tests/integration/plugins/test_ui_browser.py).
# Idempotent: does nothing when /usr/bin/chromium and /usr/bin/chromedriver exist. As root it runs
# apt-get; otherwise it stops with the exact command to run. (`npx playwright install` and other
# browser downloads do not work on a closed network; Debian's packages do.)
set -euo pipefail

CHROMIUM=/usr/bin/chromium
CHROMEDRIVER=/usr/bin/chromedriver
CMD="apt-get install -y chromium chromium-driver"

if [[ -x "$CHROMIUM" && -x "$CHROMEDRIVER" ]]; then
  echo "browser: $("$CHROMIUM" --version 2>/dev/null || echo chromium), $("$CHROMEDRIVER" --version 2>/dev/null | cut -d' ' -f1-2)"
  exit 0
fi
if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
  echo "browser: $CHROMIUM or $CHROMEDRIVER is missing. Install them with: sudo $CMD" >&2
  exit 1
fi
echo "browser: installing Debian's chromium and chromium-driver"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -qq chromium chromium-driver; then
  apt-get update -qq
  apt-get install -y -qq chromium chromium-driver
fi
if [[ ! -x "$CHROMIUM" || ! -x "$CHROMEDRIVER" ]]; then
  echo "browser: install finished but $CHROMIUM / $CHROMEDRIVER are still missing; run: $CMD" >&2
  exit 1
fi
echo "browser: $("$CHROMIUM" --version 2>/dev/null)"
