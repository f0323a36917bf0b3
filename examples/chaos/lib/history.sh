# shellcheck shell=bash
# Operation histories for `repro chaos` workloads: one JSON line per event, the format repro-history reads
# ({"process", "type", "f", "key", "value", "time"}, as Jepsen/Knossos histories; see
# crates/repro-history/src/history.rs).
#
#   source examples/chaos/lib/history.sh
#   history_op 0 invoke write 3            # process 0 starts writing 3
#   history_op 0 ok write 3                # ... and it was acknowledged
#   history_op web-1 invoke read null k1   # a named process reads key k1
#   history_op web-1 ok read 3 k1          # ... and got 3
#   history_op 2 invoke cas '[3,4]'        # cas: [expected, new]
#   history_op 2 info cas '[3,4]'          # timed out: it may or may not have happened
#
# Arguments: PROCESS TYPE F VALUE [KEY].
# - PROCESS: an integer is written as a number, anything else as a string (an instance name).
# - TYPE: invoke, ok, fail or info.
# - VALUE: written as JSON as given when it is null, true, false, a JSON number, or starts with [ or {
#   (the caller's JSON, e.g. a cas pair); anything else is written as a JSON string, escaped. To write a string
#   that looks like a number, quote it yourself as JSON: '"42"'.
# - KEY: optional, always a string.
# The file is $HISTORY_FILE (default history.jsonl in the working directory).
#
# Time: CLOCK_MONOTONIC in nanoseconds, the clock Python's time.monotonic_ns() reads (history.py), so that shell
# and Python workloads can write one history. Bash has no monotonic clock ($EPOCHREALTIME and date +%s%N are
# wall time, which can jump; /proc/uptime has 10 ms resolution), so it is read through perl's Time::HiRes (about
# 1.5 ms per call; a double, exact to a few ns for uptimes under 100 days), else python3 (slower to start). With
# neither, history_op fails rather than write a wall-clock time.
#
# Each line is written with one printf to a file opened with >> (O_APPEND): lines from concurrent processes do
# not interleave. Bash writes its output in pieces of 4096 bytes (checked with strace), so a longer line is
# refused (status 2) rather than written in two writes.

# Prints CLOCK_MONOTONIC in nanoseconds.
history_now_ns() {
    if command -v perl >/dev/null 2>&1 &&
        perl -MTime::HiRes=clock_gettime,CLOCK_MONOTONIC \
            -e 'printf "%.0f\n", clock_gettime(CLOCK_MONOTONIC) * 1e9' 2>/dev/null; then
        return 0
    fi
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import time; print(time.monotonic_ns())'
        return
    fi
    echo "history_now_ns: needs perl (Time::HiRes) or python3 for a monotonic clock" >&2
    return 1
}

# Prints $1 as a JSON string (quotes included).
history_json_string() {
    local s=$1 out="" c i
    s=${s//\\/\\\\}
    s=${s//\"/\\\"}
    s=${s//$'\n'/\\n}
    s=${s//$'\t'/\\t}
    s=${s//$'\r'/\\r}
    if [[ $s == *[$'\x01'-$'\x1f']* ]]; then
        local LC_ALL=C
        for ((i = 0; i < ${#s}; i++)); do
            c=${s:i:1}
            if [[ $c == [$'\x01'-$'\x1f'] ]]; then
                printf -v c '\\u%04x' "'$c"
            fi
            out+=$c
        done
        s=$out
    fi
    printf '"%s"' "$s"
}

# history_op PROCESS TYPE F VALUE [KEY]: appends one event to $HISTORY_FILE.
history_op() {
    if [ $# -lt 4 ] || [ $# -gt 5 ]; then
        echo "usage: history_op PROCESS TYPE F VALUE [KEY]" >&2
        return 2
    fi
    local process=$1 type=$2 f=$3 value=$4 file=${HISTORY_FILE:-history.jsonl} now line
    case $type in
        invoke | ok | fail | info) ;;
        *)
            echo "history_op: TYPE must be invoke, ok, fail or info, not '$type'" >&2
            return 2
            ;;
    esac
    if [[ ! $process =~ ^-?[0-9]+$ ]]; then
        process=$(history_json_string "$process")
    fi
    if [[ ! $value =~ ^(null|true|false|-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?)$ ]] &&
        [[ $value != \[* ]] && [[ $value != \{* ]]; then
        value=$(history_json_string "$value")
    fi
    now=$(history_now_ns) || return 1
    line="{\"process\": $process, \"type\": \"$type\", \"f\": $(history_json_string "$f")"
    if [ $# -eq 5 ]; then
        line+=", \"key\": $(history_json_string "$5")"
    fi
    line+=", \"value\": $value, \"time\": $now}"
    local LC_ALL=C
    if [ $((${#line} + 1)) -gt 4096 ]; then
        echo "history_op: a line of $((${#line} + 1)) bytes: over the 4096 bytes bash writes at once (lines of" \
            "concurrent writers could interleave); use history.py for large values" >&2
        return 2
    fi
    printf '%s\n' "$line" >>"$file"
}
