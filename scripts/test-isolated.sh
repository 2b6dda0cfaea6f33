#!/usr/bin/env bash
# Check each library in a virtual environment that holds only that library, its dependencies
# and its dev group: proof that the layering (memory_db ← memory_tools ← scraper_mcp) holds and
# nothing leans on a package it does not declare. Per library: every module its source and
# tests import resolves there and every module of the package imports (scripts/check_imports.py,
# which also sees the imports made lazily inside functions); every test module collects; and
# the tests that exercise the real components end to end pass there (the drivers loaded by
# name, not by an import statement: the asyncpg dialect, the embedded PostgreSQL, the S3
# client, fastmcp's transports, Chromium). The whole suite has already run in the full
# environment; running it again here would prove nothing more about dependencies. Then install
# each app alone: no other app may be importable there (apps only wire libraries; what two apps
# share lives in memory_tools.serving). First, the import rules an environment cannot prove
# (scripts/check_layering.py: no SQL above memory_db, no app importing another app).
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-uv}
status=0
# Every app's import package (apps/<name>/src/<package>), so a new app is checked too.
apps=$(for init in apps/*/src/*/__init__.py; do basename "$(dirname "$init")"; done)
echo "== import rules =="
"${PYTHON:-python3}" scripts/check_layering.py || status=1
# package:directory:the tests that run there (paths under the directory's tests/)
for spec in \
  "memory-db:packages/memory_db:integration/test_embedded_postgres.py integration/test_object_store_contract.py integration/test_migrations.py" \
  "memory-tools:packages/memory_tools:integration" \
  "scraper-mcp:packages/scraper_mcp:test_parity.py test_scrape_isolation.py"; do
  IFS=: read -r package path selected <<< "$spec"
  env_dir=.cache/isolated/$package
  echo "== $package (only its own dependencies) =="
  UV_PROJECT_ENVIRONMENT=$env_dir "$UV" sync --frozen --exact --package "$package" --quiet
  # The other workspace libraries must not be importable here.
  for other in memory_db memory_tools scraper_mcp $apps; do
    if [ "$other" != "${package//-/_}" ] && "$env_dir/bin/python" -c "import $other" 2>/dev/null; then
      case "$package:$other" in
        memory-tools:memory_db|scraper-mcp:memory_db|scraper-mcp:memory_tools) ;;
        *) echo "unexpected: $other is importable in the $package environment"; status=1 ;;
      esac
    fi
  done
  "$env_dir/bin/python" scripts/check_imports.py "$path" || status=1
  "$env_dir/bin/python" -m pytest -q -p no:cacheprovider --collect-only "$path/tests" > /dev/null \
    || { echo "the $package tests do not collect in its own environment"; status=1; }
  # shellcheck disable=SC2086 # the selection is a list of paths
  "$env_dir/bin/python" -m pytest -q -p no:cacheprovider $(printf "$path/tests/%s " $selected) \
    || status=1
done
for app in $apps; do
  package=${app//_/-}
  env_dir=.cache/isolated/$package
  echo "== $package (an app: only the libraries it declares) =="
  # Not compiled to bytecode (the Makefile exports UV_COMPILE_BYTECODE=1 for the workspace):
  # this environment serves one import of the app, and compiling every installed module first
  # took 9 s of CPU against the 2 s that import spends compiling only what it loads.
  UV_COMPILE_BYTECODE=0 UV_PROJECT_ENVIRONMENT=$env_dir "$UV" sync --frozen --exact --no-dev \
    --package "$package" --quiet
  "$env_dir/bin/python" -c "import $app" || { echo "$app does not import alone"; status=1; }
  for other in $apps; do
    if [ "$other" != "$app" ] && "$env_dir/bin/python" -c "import $other" 2>/dev/null; then
      echo "unexpected: the app $other is importable in the $package environment"; status=1
    fi
  done
done
exit $status
