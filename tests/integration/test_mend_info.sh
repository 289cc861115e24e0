#!/usr/bin/env bash
# mend-info: the parameter table (header and rows of the misc section; every variable read by name
# is a row), --env, --version, exit codes.
set -u
cd "$(dirname "$0")/../.."
B=${MEND_BUILDDIR:-build}
TOOL="$B/bin/mend-info"
ok() { echo "ok $1"; }
nok() { echo "not ok $1: $2"; }
if [ ! -x "$TOOL" ]; then echo "not ok mend_info_built: $TOOL missing"; exit 1; fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT

env -u NCCL_DEBUG_SUBSYS MEND_FAULT_INJECT='socket.connect:3' NCCL_CONF_FILE="$T/none.conf" \
    "$TOOL" --params > "$T/params" 2> "$T/err"; rc=$?
[ $rc -eq 0 ] && ok params_exit_0 || nok params_exit_0 "rc=$rc $(head -3 "$T/err")"
head -1 "$T/params" | grep -Eq '^NAME +TYPE +DEFAULT +UNIT +VALUE +DOC$' && ok params_header \
  || nok params_header "$(head -1 "$T/params")"
grep -Eq '^NCCL_DEBUG_SUBSYS +str +INIT,BOOTSTRAP,ENV +list +- +Subsystems logged at INFO' "$T/params" \
  && ok params_row_debug_subsys || nok params_row_debug_subsys "$(grep NCCL_DEBUG_SUBSYS "$T/params")"
grep -Eq '^NCCL_WARN_ENABLE_DEBUG_INFO +int +0 +bool +- ' "$T/params" \
  && ok params_row_int || nok params_row_int "$(grep NCCL_WARN_ENABLE_DEBUG_INFO "$T/params")"
grep -Eq '^MEND_FAULT_INJECT +str +- +list +socket\.connect:3 +Testing:' "$T/params" \
  && ok params_row_shows_value || nok params_row_shows_value "$(grep MEND_FAULT_INJECT "$T/params")"
grep -Eq '^NCCL_NVLS_ENABLE +str .*accepted for compatibility; no effect in Mend$' "$T/params" \
  && ok params_row_compat || nok params_row_compat "$(grep NCCL_NVLS_ENABLE "$T/params")"
# Every row has the same column layout as the header: the DOC column starts at one offset.
col=$(head -1 "$T/params" | awk '{print index($0, "DOC")}')
badrows=$(awk -v c="$col" 'NR > 1 && substr($0, c - 2, 2) != "  " {print $1}' "$T/params" | head -3)
[ -z "$badrows" ] && ok params_aligned || nok params_aligned "$badrows"
dups=$(awk 'NR > 1 {print $1}' "$T/params" | sort | uniq -d | head -3)
[ -z "$dups" ] && ok params_unique || nok params_unique "$dups"

# --params prints every row of the one registry, and nothing else.
grep -oE '^MEND_PARAM_(INT|STR)\([A-Za-z0-9]+, *"[A-Za-z0-9_]+"' src/misc/params.def | sed -E 's/.*"(.*)"/\1/' | sort > "$T/want"
awk 'NR > 1 {print $1}' "$T/params" | sort > "$T/got"
diffs=$(diff "$T/want" "$T/got" | grep '^[<>]' | head -5 | tr '\n' ' ')
[ -s "$T/want" ] && [ -z "$diffs" ] && ok params_lists_all_$(wc -l < "$T/want")_registry_rows \
  || nok params_lists_all_registry_rows "${diffs:-no rows read from src/misc/params.def}"

# --env: only what is set, from the environment or the config file.
printf '# test\nNCCL_DEBUG_FILE=/dev/null\n' > "$T/c.conf"
env -u NCCL_DEBUG -u NCCL_DEBUG_SUBSYS -u MEND_FAULT_INJECT NCCL_CONF_FILE="$T/c.conf" NCCL_WARN_ENABLE_DEBUG_INFO=1 \
    "$TOOL" --env > "$T/env" 2>&1
grep -qx 'NCCL_WARN_ENABLE_DEBUG_INFO=1  (environment)' "$T/env" && ok env_lists_environment \
  || nok env_lists_environment "$(cat "$T/env")"
grep -qx 'NCCL_DEBUG_FILE=/dev/null  (config file)' "$T/env" && ok env_lists_config_file \
  || nok env_lists_config_file "$(cat "$T/env")"
grep -q '^NCCL_DEBUG_SUBSYS=' "$T/env" && nok env_only_set "NCCL_DEBUG_SUBSYS listed" || ok env_only_set

# Every NCCL_*/MEND_* variable the library reads by name (getenv or mendGetEnv with a literal, or a
# registry row's getter) is a row of --params: the plugin loaders' NCCL_NET_PLUGIN and
# NCCL_TUNER_PLUGIN were read outside the registry (issue 15).
reads=$(grep -rhoE '(getenv|mendGetEnv)\("(NCCL|MEND)_[A-Z0-9_]+"\)' src --include='*.c' --include='*.h' \
        --exclude-dir=tools | grep -oE '(NCCL|MEND)_[A-Z0-9_]+' | sort -u)
unlisted=$(for v in $reads NCCL_NET_PLUGIN NCCL_TUNER_PLUGIN; do grep -q "^$v " "$T/params" || echo "$v"; done | head -5)
[ -z "$unlisted" ] && ok "params_list_every_read_variable # $(echo $reads | wc -w) read by name, plugins" \
  || nok params_list_every_read_variable "$unlisted"
# A plugin variable that is used is never logged as ignored.
tuner="$B/lib/libnccl-tuner-example.so"
if [ -f "$tuner" ] && [ -x "$B/bin/all_reduce_perf" ]; then
  env NCCL_TUNER_PLUGIN="$tuner" NCCL_NET_PLUGIN=none NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ENV,TUNING \
    LD_LIBRARY_PATH="$B/lib" timeout 60 "$B/bin/all_reduce_perf" -t 2 -b 8 -e 8 -n 1 -w 0 > "$T/tuner" 2>&1; rc=$?
  [ $rc -eq 0 ] && grep -q 'NCCL_TUNER_PLUGIN set by environment' "$T/tuner" && grep -q 'TUNER/Plugin: using' "$T/tuner" \
    && ! grep -q 'PLUGIN is set .* ignored' "$T/tuner" && ok plugin_variables_not_ignored \
    || nok plugin_variables_not_ignored "rc=$rc $(grep -i 'plugin' "$T/tuner" | head -3)"
else
  ok "plugin_variables_not_ignored # SKIP no example tuner (make tests builds it)"
fi

"$TOOL" --version > "$T/ver"; rc=$?
[ $rc -eq 0 ] && grep -Eq '^NCCL version 2\.[0-9]+\.[0-9]+.*\+(host|cuda[0-9]+\.[0-9]+) \(code [0-9]+\), Mend ' "$T/ver" \
  && ok version_line || nok version_line "rc=$rc $(cat "$T/ver")"
api=$(awk '/^NCCL_(MAJOR|MINOR|PATCH)/ {v = v (v ? "." : "") $3} END {print v}' makefiles/version.mk)
grep -q "^API level: NCCL $api " "$T/ver" && ok version_api_level || nok version_api_level "$(cat "$T/ver")"
"$TOOL" -h > "$T/h"; rc=$?
[ $rc -eq 0 ] && grep -q -- '--params' "$T/h" && ok help_exit_0 || nok help_exit_0 "rc=$rc"
"$TOOL" --bogus > /dev/null 2>&1; rc=$?
[ $rc -eq 2 ] && ok bad_option_exit_2 || nok bad_option_exit_2 "rc=$rc"
"$TOOL" > /dev/null 2>&1; rc=$?
[ $rc -eq 2 ] && ok no_option_exit_2 || nok no_option_exit_2 "rc=$rc"
exit 0
