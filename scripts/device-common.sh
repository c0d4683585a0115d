# Sourced by the device scripts (scripts/device-*.sh), on a lent GPU machine from the repository
# root: installs the kit's wheels once per machine (several runs may race here) and puts them and
# the repository on PYTHONPATH. Reads KIT (default .device), PYTHON and SITE.
KIT=${KIT:-.device}
PYTHON=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}
mkdir -p "$SITE"
(
    flock 9
    wheels=("$KIT"/whl/*.whl)
    if [ ! -e "$SITE/.installed" ] && [ -e "${wheels[0]}" ]; then
        "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$SITE" "${wheels[@]}"
    fi
    touch "$SITE/.installed"
) 9>"$SITE/.lock"
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

# Progress bars as lines, without the per-step refreshes.
quiet_bars() { tr '\r' '\n' | grep -v 'step/s[],]\|it/s[],]' >&2; }
