#!/usr/bin/env bash
# Make sure a Chromium is installed for scrape_page_screenshot (docs/configuration.md#page-screenshots).
# Present (SCRAPER_CHROMIUM_PATH, or chromium / chromium-browser on PATH): nothing to do.
# Missing: install Debian's `chromium` package with apt-get, non-interactively and quietly
# (as root, or through sudo). `--required` (make test): fail when it cannot be installed;
# otherwise (make install) say so and carry on: the server then simply does not offer the tool.
set -uo pipefail
required=false
[ "${1:-}" = "--required" ] && required=true

if [ -n "${SCRAPER_CHROMIUM_PATH:-}" ] && [ -x "${SCRAPER_CHROMIUM_PATH}" ]; then exit 0; fi
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then exit 0; fi

give_up() {
  echo "chromium: $1" >&2
  echo "chromium: scrape_page_screenshot needs it: install Chromium, or set SCRAPER_CHROMIUM_PATH" >&2
  if $required; then exit 1; fi
  exit 0
}

if ! command -v apt-get >/dev/null 2>&1; then give_up "not found, and apt-get is not available here"; fi
if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  give_up "not found, and installing it needs root (run: sudo apt-get install chromium)"
fi
echo "chromium: not found; installing Debian's chromium package with apt-get"
apt() { "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "$@"; }
# A fresh image may have no package lists yet: update once if the first attempt fails.
if ! apt install -y -qq chromium >/dev/null; then
  apt update -qq >/dev/null && apt install -y -qq chromium >/dev/null \
    || give_up "apt-get could not install the chromium package"
fi
command -v chromium >/dev/null 2>&1 || give_up "the chromium package installed no chromium command"
echo "chromium: installed $(chromium --version 2>/dev/null)"
