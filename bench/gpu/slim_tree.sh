#!/usr/bin/env bash
# A device run carries the whole tracked tree, at most 64 MiB; the judge models and the raw
# result files make it ~190 MB. `bash bench/gpu/slim_tree.sh hide` moves them (all committed)
# to /tmp/gpuhold before a session's device runs; `show` puts them back (`git checkout -- .`
# restores them too, should /tmp be gone). Nothing a GPU run needs is among them, but for the
# judge's trainings (bench/gpu/judge20.sh) the corpus: `hide judge` keeps tests/data/judge.
set -eu
cd "$(git rev-parse --show-toplevel)"
HOLD=${GPU_HOLD:-/tmp/gpuhold}
PATHS="proxy/cache/judge_model proxy/cache/judge_model_minilm docs/results docs/routing-results
docs/gpu-results tests/data/judge"
case "${1:-}" in
  hide)
    for d in $PATHS; do
      [ -e "$d" ] || continue
      [ "${2:-}" = judge ] && [ "$d" = tests/data/judge ] && continue
      mkdir -p "$HOLD/$(dirname "$d")"; mv "$d" "$HOLD/$d"
    done
    git ls-files -z | xargs -0 du -cb 2> /dev/null | tail -1 ;;
  show)
    for d in $PATHS; do
      if [ -e "$HOLD/$d" ] && [ ! -e "$d" ]; then mv "$HOLD/$d" "$d"; fi
    done
    git status --short | head ;;
  *) echo "usage: $0 hide [judge]|show" >&2; exit 2 ;;
esac
