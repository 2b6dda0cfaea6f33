#!/usr/bin/env bash
# Run each library's own tests in a virtual environment that holds only that library, its
# dependencies and its dev group: proof that the layering (memory_db ← memory_tools ←
# scraper_mcp) holds and nothing leans on a package it does not declare. Then install each app
# alone: no other app may be importable there (apps only wire libraries; what two apps share
# lives in memory_tools.serving). First, the import rules an environment cannot prove
# (scripts/check_layering.py: no SQL above memory_db, no app importing another app).
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-uv}
status=0
# Every app's import package (apps/<name>/src/<package>), so a new app is checked too.
apps=$(for init in apps/*/src/*/__init__.py; do basename "$(dirname "$init")"; done)
echo "== import rules =="
"${PYTHON:-python3}" scripts/check_layering.py || status=1
for spec in memory-db:packages/memory_db memory-tools:packages/memory_tools scraper-mcp:packages/scraper_mcp; do
  package=${spec%%:*}
  path=${spec#*:}
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
  "$env_dir/bin/python" -m pytest -q -p no:cacheprovider "$path/tests" || status=1
done
for app in $apps; do
  package=${app//_/-}
  env_dir=.cache/isolated/$package
  echo "== $package (an app: only the libraries it declares) =="
  UV_PROJECT_ENVIRONMENT=$env_dir "$UV" sync --frozen --exact --no-dev --package "$package" --quiet
  "$env_dir/bin/python" -c "import $app" || { echo "$app does not import alone"; status=1; }
  for other in $apps; do
    if [ "$other" != "$app" ] && "$env_dir/bin/python" -c "import $other" 2>/dev/null; then
      echo "unexpected: the app $other is importable in the $package environment"; status=1
    fi
  done
done
exit $status
