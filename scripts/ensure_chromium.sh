#!/usr/bin/env bash
# The Baton page's browser test drives a real headless Chromium: Debian's `chromium` package (Playwright's
# own browser download needs internet access the machines here do not have). Installed when missing,
# as root through apt-get; otherwise the message says what to install.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || [ -n "${BATON_CHROMIUM:-}" ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's chromium for the browser tests (apt-get) ..."
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }
  command -v chromium >/dev/null && exit 0
fi
echo "The browser tests need Chromium: install Debian's package (apt-get install -y chromium) or set" >&2
echo "BATON_CHROMIUM=/path/to/chromium, then run make test again." >&2
exit 2
