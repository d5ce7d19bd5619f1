#!/usr/bin/env bash
# System packages the report tests need: headless Chromium (Debian's `chromium`)
# opens the generated HTML (tests/report/test_browser.py).  Idempotent.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  echo "chromium: $(chromium --version 2>/dev/null | head -1)"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium
chromium --version 2>/dev/null | head -1
