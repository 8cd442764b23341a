#!/bin/bash
# Checks that src/ and tests/unit/ are formatted as .clang-format says.
#   tests/static/format.sh           list the files that differ; exit 1 if any
#   tests/static/format.sh --count   also print how many lines a reformat would change
#   tests/static/format.sh --fix     reformat the files in place
# Needs clang-format (Debian package clang-format; deploy/deps.sh --test).
set -euo pipefail
cd "$(dirname "$0")/../.."

mode=check
case "${1:-}" in
  "") ;;
  --count) mode=count ;;
  --fix) mode=fix ;;
  *) echo "usage: $0 [--count | --fix]" >&2; exit 2 ;;
esac

if ! command -v clang-format >/dev/null 2>&1; then
  echo "format.sh: clang-format not found (apt-get install clang-format)" >&2
  exit 2
fi

files=$(find src tests/unit -name "*.[ch]" | sort)
bad=0 lines=0
for f in $files; do
  if [ "$mode" = fix ]; then
    clang-format -i --style=file "$f"
    continue
  fi
  n=$(clang-format --style=file "$f" | diff "$f" - | grep -c '^<' || true)
  if [ "$n" -gt 0 ]; then
    echo "$f: $n lines differ"
    bad=$((bad + 1))
    lines=$((lines + n))
  fi
done
[ "$mode" = fix ] && exit 0
if [ "$mode" = count ]; then
  echo "format.sh: $bad files, $lines lines would change"
fi
if [ "$bad" -gt 0 ]; then
  echo "format.sh: $bad files are not formatted (tests/static/format.sh --fix)" >&2
  exit 1
fi
echo "format.sh: all files formatted"
