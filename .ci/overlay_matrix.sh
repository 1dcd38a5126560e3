#!/usr/bin/env bash
# Tests again under other versions of a package than the CI venv holds, without touching it:
# Arena's MCP support under mcp 1.x and 2.0.0 (what verifiers 0.3 and 0.4 pin; the CI venv has
# the newest 2.x), and the verifiers environments under verifiers 0.3.x and 0.4.x (both pull an
# older mcp, so neither lives in the CI venv).
#
#   .ci/overlay_matrix.sh VENV "REQUIREMENT ..." TEST ...
#
# Each requirement gets an overlay venv in a temporary folder: it sees VENV's packages (a .pth runs
# site.addsitedir on VENV's site-packages, so VENV's editable installs resolve too) and holds
# only that requirement and whatever of its dependencies VENV lacks (pip installs there, and never
# uninstalls what lives outside the overlay). The overlay's site-packages come first on sys.path,
# so its packages shadow VENV's. Where the overlay ends up with mcp 1.x, `mcp_types` (a 2.x
# package still in VENV) is made unimportable, as it is where only 1.x is installed. Exits
# non-zero when a test fails.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=$(cd "$1" && pwd)
read -r -a VERSIONS <<<"$2"
shift 2
TESTS=("$@")
BASE_PY="$VENV/bin/python"
SITE=$("$BASE_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
PYVER=$("$BASE_PY" -c 'import sys; print(f"python{sys.version_info[0]}.{sys.version_info[1]}")')

WORK=$(mktemp -d -t arena-overlay-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
status=0
for requirement in "${VERSIONS[@]}"; do
  overlay="$WORK/venv-$(echo "$requirement" | tr -c 'A-Za-z0-9.\n' '_')"
  "$BASE_PY" -m venv --without-pip "$overlay"
  overlay_site="$overlay/lib/$PYVER/site-packages"
  echo "import site; site.addsitedir('$SITE')" >"$overlay_site/zz_base_venv.pth"
  "$BASE_PY" -m pip --python "$overlay/bin/python" install --quiet --disable-pip-version-check \
    --no-warn-conflicts "$requirement"
  name=$(echo "$requirement" | sed -E 's/[<>=!~; ].*//')
  where=$("$overlay/bin/python" -c "import importlib.metadata as m; d = m.distribution('$name'); print(d.locate_file(''))")
  case "$where" in
    "$overlay"/*) ;;
    *) echo "overlay_matrix: $requirement: $name resolves to $where, not the overlay" >&2; exit 1 ;;
  esac
  mcp=$("$overlay/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))' 2>/dev/null || true)
  if [[ "$mcp" == 1.* ]]; then
    echo "import sys; sys.modules['mcp_types'] = None" >"$overlay_site/zz_no_mcp_types.pth"
  fi
  version=$("$overlay/bin/python" -c "import importlib.metadata as m; print(m.version('$name'))")
  echo "=== tests under $name $version (mcp ${mcp:-absent})"
  started=$SECONDS
  # the overlay's bin first: servers the tests start as `python ...` run on the same packages
  if PATH="$overlay/bin:$PATH" "$overlay/bin/python" -m pytest -q -p no:cacheprovider \
    "${TESTS[@]}"; then
    echo "=== $name $version: passed in $((SECONDS - started)) s"
  else
    echo "=== $name $version: FAILED" >&2
    status=1
  fi
done
exit $status
