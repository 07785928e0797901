# Sourced by the device scripts (lm_gpu.sh, proxy/gpu.sh): installs every carried wheel folder (.whl/NAME/, from
# fetch_wheels.sh) into $SITE once per machine (a warm machine keeps them; a marker file says which are in), then puts
# $SITE and the repository on PYTHONPATH, after any path the caller set.
SITE=${HLNAS_SITE:-/tmp/site}
for d in .whl/*/; do
  [ -d "$d" ] || continue
  w=$(basename "$d"); [ -f "$SITE/.hlnas_$w" ] && continue
  ${PY:-python3} -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$d"*.whl \
    && touch "$SITE/.hlnas_$w" || { echo "could not install the wheels of $d into $SITE"; exit 1; }
done
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$SITE:$PWD
