#!/usr/bin/env bash
# timed.sh NAME COMMAND...: runs COMMAND, then prints how long the pass
# NAME took and how it ended, so that CI's log says where its time goes.
name=$1
shift
start=$(date +%s)
"$@"
rc=$?
echo "== pass $name: $(($(date +%s) - start)) s, exit $rc"
exit $rc
