# Helpers for the lab's scenario groups (busybox sh, sourced before a group's file).
# Every check appends one line to $LAB_RESULT, which the host reads:
#   PASS <scenario>: <check>    FAIL <scenario>: <check>: <why>    INFO <scenario>: <observation>
# Selectors name one metric and optional label matchers, as PromQL writes them:
#   'hpcnode_module_loads_total{module="pcspkr"}'  'hpcnode_ebpf_probe_attached{hook=~"fexit|kretprobe"}'
# (matchers =, !=, =~ anchored; values without commas). A selector's value is the sum of the
# samples it matches, 0 when none does.

LAB_EXPORTER=/lab/bin/hpcnode_exporter
LAB_ADDRESS=127.0.0.1:10133
LAB_TMP=/tmp/lab-$LAB_GROUP
LAB_SCENARIO=$LAB_GROUP
mkdir -p "$LAB_TMP"

# Names the scenario that the following checks belong to.
lab_scenario() {
  LAB_SCENARIO=$1
  echo "== $LAB_GROUP/$1 (guest uptime $(cut -d' ' -f1 /proc/uptime) s)" # where a group's time goes
}

lab_record() {
  echo "$*" >> "$LAB_RESULT"
  echo "$*"
}
lab_pass() { lab_record "PASS $LAB_SCENARIO: $1"; }
lab_fail() { lab_record "FAIL $LAB_SCENARIO: $1: $2"; }
lab_info() { lab_record "INFO $LAB_SCENARIO: $*"; }

# lab_check CHECK COMMAND...: passes when the command succeeds.
lab_check() {
  local check="$1"
  shift
  if "$@"; then lab_pass "$check"; else lab_fail "$check" "command failed: $*"; fi
}

# lab_check_fails CHECK COMMAND...: passes when the command fails (a refused load).
lab_check_fails() {
  local check="$1"
  shift
  if "$@"; then lab_fail "$check" "command succeeded: $*"; else lab_pass "$check"; fi
}

# lab_compare ACTUAL OP EXPECTED: numeric comparison, OP one of == != >= <= > <.
lab_compare() {
  awk -v a="$1" -v op="$2" -v b="$3" 'BEGIN {
    if (a !~ /^-?[0-9.e+]+$/) exit 1
    ok = (op == "==") ? a == b : (op == "!=") ? a != b : (op == ">=") ? a >= b : \
         (op == "<=") ? a <= b : (op == ">") ? a > b : (op == "<") ? a < b : 0
    exit !ok }'
}

# lab_expect CHECK ACTUAL OP EXPECTED: records whether ACTUAL OP EXPECTED holds.
lab_expect() {
  if lab_compare "$2" "$3" "$4"; then
    lab_pass "$1 ($2 $3 $4)"
  else
    lab_fail "$1" "got '$2', want $3 $4"
  fi
}

# lab_wait_until SECONDS COMMAND...: polls the command every half second; fails at the limit.
lab_wait_until() {
  local limit=$(($1 * 2))
  shift
  while ! "$@"; do
    limit=$((limit - 1))
    [ "$limit" -gt 0 ] || return 1
    sleep 0.5
  done
}

# lab_softroce_up: Soft-RoCE's rxe0 on dummy0 (10.0.0.1/24), checked ACTIVE on port 1 (groups
# declare the modules; crc32_pclmul needs PCLMULQDQ, rxe works with crc32_generic alone).
lab_softroce_up() {
  modprobe -a rdma_rxe ib_uverbs rdma_ucm crc32_generic dummy
  modprobe crc32_pclmul 2> /dev/null
  ip link show dummy0 > /dev/null 2>&1 || ip link add dummy0 type dummy
  ip addr add 10.0.0.1/24 dev dummy0 2> /dev/null
  ip link set dummy0 up
  [ -e /sys/class/infiniband/rxe0 ] || rdma link add rxe0 type rxe netdev dummy0
  lab_check "rxe0 port 1 is ACTIVE" lab_wait_until 20 grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state
}

# lab_roce_v2_gid: the lowest GID index of rxe0 port 1 whose type is RoCE v2 (what ib_write_bw's
# -x takes); empty when there is none.
lab_roce_v2_gid() {
  local types=/sys/class/infiniband/rxe0/ports/1/gid_attrs/types index
  for index in $(ls "$types" | sort -n); do
    [ "$(cat "$types/$index" 2> /dev/null)" = "RoCE v2" ] && echo "$index" && return
  done
}

lab_exporter_alive() {
  [ -f /tmp/lab-exporter.pid ] && kill -0 "$(cat /tmp/lab-exporter.pid)" 2>/dev/null
}

# busybox wget's own -T option crashes (SIGSEGV) the static build in the guest: timeout bounds it.
lab_exporter_answers() {
  timeout 20 wget -q -O /dev/null "http://$LAB_ADDRESS/metrics" 2>/dev/null
}

# lab_exporter_start ARGS...: starts the exporter under test with the given flags (its log goes
# to the share) and waits until it answers (LAB_START_SECONDS, default 90); records a failed
# check when it exits or stays silent.
lab_exporter_start() {
  local check="exporter starts with: $*" tries=$((${LAB_START_SECONDS:-90} * 2))
  lab_exporter_stop
  LAB_EXPORTER_LOG=/lab/results/$LAB_GROUP.$LAB_SCENARIO.exporter.log
  "$LAB_EXPORTER" --web.listen-address="$LAB_ADDRESS" "$@" > "$LAB_EXPORTER_LOG" 2>&1 &
  echo $! > /tmp/lab-exporter.pid
  while ! lab_exporter_answers; do
    if ! lab_exporter_alive; then
      lab_fail "$check" "it exited; log: $(tail -c 600 "$LAB_EXPORTER_LOG")"
      rm -f /tmp/lab-exporter.pid
      return 1
    fi
    tries=$((tries - 1))
    if [ "$tries" -le 0 ]; then
      lab_fail "$check" "no answer in ${LAB_START_SECONDS:-90} s; log: $(tail -c 600 "$LAB_EXPORTER_LOG")"
      return 1
    fi
    sleep 0.5
  done
  lab_pass "$check"
}

lab_exporter_stop() {
  if [ -f /tmp/lab-exporter.pid ]; then
    # Its CPU time (all threads, utime + stime in ticks of 10 ms) in the group's log: the part of
    # the guest's time the exporter under test spent, next to the scenario's own tools.
    awk '{ printf "exporter used %.2f s of CPU\n", ($14 + $15) / 100 }' "/proc/$(cat /tmp/lab-exporter.pid)/stat" 2>/dev/null
    kill "$(cat /tmp/lab-exporter.pid)" 2>/dev/null
    lab_wait_until 10 sh -c '! kill -0 $(cat /tmp/lab-exporter.pid) 2>/dev/null' ||
      kill -9 "$(cat /tmp/lab-exporter.pid)" 2>/dev/null
    rm -f /tmp/lab-exporter.pid
  fi
}

# lab_scrape NAME: saves one /metrics answer as $LAB_TMP/NAME.prom (and in the share).
lab_scrape() {
  if timeout 60 wget -q -O "$LAB_TMP/$1.prom" "http://$LAB_ADDRESS/metrics"; then
    cp "$LAB_TMP/$1.prom" "/lab/results/$LAB_GROUP.$1.prom"
  else
    lab_fail "scrape $1" "no /metrics answer"
    : > "$LAB_TMP/$1.prom"
    return 1
  fi
}

# Prints the samples of scrape NAME that SELECTOR matches, one "line<TAB>value" each.
lab_matching() {
  awk -v selector="$2" '
    function parse_selector(    inner, parts, n, i, m) {
      want_name = selector
      matchers = 0
      if (selector !~ /^[a-zA-Z_:][a-zA-Z0-9_:]*([{].*[}])?$/) return 0
      if (index(selector, "{") == 0) return 1
      want_name = substr(selector, 1, index(selector, "{") - 1)
      inner = substr(selector, index(selector, "{") + 1)
      sub(/}$/, "", inner)
      n = split(inner, parts, ",")
      for (i = 1; i <= n; i++) {
        if (parts[i] !~ /^[a-zA-Z_][a-zA-Z0-9_]*(=~|!=|=)"[^"]*"$/) return 0
        match(parts[i], /(=~|!=|=)"/)
        matchers++
        key[matchers] = substr(parts[i], 1, RSTART - 1)
        op[matchers] = substr(parts[i], RSTART, RLENGTH - 1)
        m = substr(parts[i], RSTART + RLENGTH)
        sub(/"$/, "", m)
        value[matchers] = m
      }
      return 1
    }
    BEGIN {
      if (!parse_selector()) {
        print "lab: malformed selector: " selector > "/dev/stderr"
        exit 2
      }
    }
    /^#/ || NF < 2 { next }
    {
      line = $0
      brace = index(line, "{")
      name = brace ? substr(line, 1, brace - 1) : $1
      if (name != want_name) next
      delete labels
      if (brace) {
        rest = substr(line, brace + 1)
        while (match(rest, /^[a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*"/)) {
          pair = substr(rest, 1, RLENGTH)
          eq = index(pair, "=")
          labels[substr(pair, 1, eq - 1)] = substr(pair, eq + 2, length(pair) - eq - 2)
          rest = substr(rest, RLENGTH + 1)
          sub(/^,/, "", rest)
        }
      }
      for (i = 1; i <= matchers; i++) {
        have = (key[i] in labels) ? labels[key[i]] : ""
        if (op[i] == "=" && have != value[i]) next
        if (op[i] == "!=" && have == value[i]) next
        if (op[i] == "=~" && have !~ ("^(" value[i] ")$")) next
      }
      print line "\t" $NF
    }' "$LAB_TMP/$1.prom"
}

# lab_value NAME SELECTOR: the sum of the matching samples in scrape NAME (0 when none); for a
# malformed selector a word that fails every comparison.
lab_value() {
  local samples
  samples=$(lab_matching "$1" "$2") || { echo "malformed-selector"; return 1; }
  printf '%s\n' "$samples" | awk -F '\t' 'NF > 1 { sum += $2 } END { printf "%.15g\n", sum }'
}

# lab_series NAME SELECTOR: how many samples of scrape NAME match.
lab_series() {
  local samples
  samples=$(lab_matching "$1" "$2") || { echo "malformed-selector"; return 1; }
  printf '%s' "$samples" | grep -c . || true
}

# lab_delta BEFORE AFTER SELECTOR: value in scrape AFTER minus value in scrape BEFORE.
lab_delta() {
  awk -v a="$(lab_value "$1" "$3")" -v b="$(lab_value "$2" "$3")" 'BEGIN { printf "%.15g\n", b - a }'
}

# lab_expect_delta CHECK BEFORE AFTER SELECTOR OP N: the change of SELECTOR from scrape BEFORE to
# scrape AFTER, compared with N. Events reach the exporter asynchronously (ring buffers, the
# kernel log), so while the comparison fails AFTER is scraped again, for up to 15 s.
lab_expect_delta() {
  local check="$1" before="$2" after="$3" selector="$4" op="$5" want="$6" tries=30 delta
  while :; do
    delta=$(lab_delta "$before" "$after" "$selector")
    if lab_compare "$delta" "$op" "$want" || [ "$tries" -le 0 ]; then break; fi
    tries=$((tries - 1))
    sleep 0.5
    lab_scrape "$after" || break
  done
  lab_expect "$check: change of $selector" "$delta" "$op" "$want"
}

# lab_record_series NAME SELECTOR: an INFO line per matching sample of scrape NAME.
lab_record_series() {
  lab_matching "$1" "$2" | while IFS="$(printf '\t')" read -r line value; do lab_info "$line"; done
}

# lab_record_changes BEFORE AFTER SELECTOR: an INFO line per matching series whose value moved,
# to record what the kernel really did (e.g. which signature verdict a corrupted module got).
lab_record_changes() {
  lab_matching "$2" "$3" | while IFS="$(printf '\t')" read -r line value; do
    series=${line% *}
    before=$(lab_value "$1" "$series")
    [ "$before" = "$value" ] || lab_info "$series: $before -> $value"
  done
}
