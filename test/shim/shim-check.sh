#!/bin/sh
# make check: the shim preloaded under mpirun (see run-shim.sh)
exec "$(dirname "$0")/run-shim.sh"
