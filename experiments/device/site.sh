# Sourced by the device scripts (h200.sh, lm_gpu.sh, proxy/gpu.sh): installs the carried wheels into $SITE once per
# machine (a warm machine keeps them; a marker file per folder says which are in), then puts $SITE and the repository
# on PYTHONPATH, after any path the caller set. Exits the calling script when an install fails.
SITE=${HLNAS_SITE:-/tmp/site} PARTS=${HLNAS_PARTS:-/tmp/parts}  # HLNAS_SITE, HLNAS_PARTS: tests only
_site_say() { if declare -F say >/dev/null; then say "$@"; else echo "$*"; fi; }
_site_install() {  # $1 marker name, then wheel files
  local name=$1; shift
  ${PY:-python3} -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$@" \
    && touch "$SITE/.hlnas_$name"
}
# every carried wheel folder (fetch_wheels.sh): .whl/gpu (fla, optuna, pytest and their needs)
for d in .whl/*/; do
  [ -d "$d" ] || continue  # nothing carried: what an earlier call installed on this machine, if anything
  w=$(basename "$d"); [ -f "$SITE/.hlnas_$w" ] && continue
  _site_install "$w" "$d"*.whl || { _site_say "could not install the wheels of $d into $SITE"; exit 1; }
  _site_say "installed $(ls "$d" | wc -l) wheels of .whl/$w"
done
# wheels too large for one call's carry: tilelang and its needs (82.5 MB; GatedDeltaNet's fla backward, fla #640) pass
# the 64 MiB limit beside the repository, so fetch_wheels.sh tilelang packs them as one tar in 20 MB parts, .whl_parts/
# NAME.tar.aa, .ab, ... with NAME.parts holding their count. Each call carries NAME.parts and the parts it can; they
# wait in $PARTS on this machine (calls back to back: a machine that goes back loses them) until all are here
for n in .whl_parts/*.parts; do
  [ -f "$n" ] || continue
  name=$(basename "$n" .parts) want=$(cat "$n")
  [ -f "$SITE/.hlnas_$name" ] && continue
  mkdir -p "$PARTS" && cp .whl_parts/"$name".tar.* "$PARTS"/ 2>/dev/null
  have=$(ls "$PARTS"/"$name".tar.* 2>/dev/null | wc -l)
  if [ "$have" -lt "$want" ]; then
    _site_say "staged $name: $have of $want parts on this machine; carry the others in the next calls, back to back"
    continue
  fi
  rm -rf "$PARTS/$name" && mkdir -p "$PARTS/$name" && cat "$PARTS"/"$name".tar.* | tar xf - -C "$PARTS/$name" || exit 1
  wheels=$(find "$PARTS/$name" -name '*.whl' | sort)
  _site_install "$name" $wheels || { _site_say "could not install the wheels of $name into $SITE"; exit 1; }
  _site_say "installed $(echo "$wheels" | wc -l) wheels of $name from $want parts"
done
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$SITE:$PWD
