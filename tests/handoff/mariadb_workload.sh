# mariadb_workload.sh — sourced by real_programs.sh (needs lib, limit, runs,
# tmp, settings, setting_name, loom_env, fibres_ran, bounded, tasks, fail,
# ran and the variable server, which its EXIT trap kills). mariadb_check runs
# mariadbd plainly, then preloaded on each setting, with the same workload,
# and compares what its clients read.
#
# One run (mariadb_run): a data directory copied from one made once by
# mariadb-install-db (plain: it is the set-up, not the test), mariadbd on a
# unix socket in it (no TCP port: nothing to collide with), as the user
# running the test (root's account and that user's are socket-authenticated);
# the set-up client, then CLIENTS (4) clients at once, each: its own table of
# 5,000 rows, a transaction that updates it, inserts 500 rows into a table
# they share and bumps a row they all update, a transaction rolled back, 50
# single-row commits with a read after each, and its checksums; then the
# shared table's and that row's totals; then mariadb-admin shutdown, and
# mariadbd must exit 0. Every step is bounded by REAL_TIMEOUT (limit); a
# server that does not answer, finish a client or stop in time is described
# (tasks) and killed by its PID.
clients=4
me=$(id -un)

mariadb_sql() {  # client number: its statements
  local i=$1 j
  cat << SQL
CREATE TABLE t$i (id INT PRIMARY KEY, v CHAR(32), n INT) ENGINE=InnoDB;
INSERT INTO t$i SELECT seq, MD5(CONCAT($i, '-', seq)), seq * $i FROM seq_1_to_5000;
START TRANSACTION;
UPDATE t$i SET n = n + 1 WHERE id % 3 = 0;
INSERT INTO shared SELECT $i, seq, SHA1(CONCAT($i, '/', seq)) FROM seq_1_to_500;
UPDATE counter SET n = n + 1 WHERE id = 1;
COMMIT;
START TRANSACTION;
DELETE FROM t$i WHERE id > 1000;
UPDATE counter SET n = n + 1000 WHERE id = 1;
ROLLBACK;
SQL
  for ((j = 1; j <= 50; j++)); do
    echo "INSERT INTO shared VALUES ($i, $((1000 + j)), 'row $j'); UPDATE counter SET n = n + 1 WHERE id = 1;"
    echo "SELECT 'client', $i, COUNT(*) FROM shared WHERE client = $i;"
  done
  cat << SQL
SELECT 'client', $i, COUNT(*), SUM(n), MD5(GROUP_CONCAT(v ORDER BY id SEPARATOR '')) FROM t$i;
SELECT 'client', $i, 'shared', COUNT(*), SUM(k) FROM shared WHERE client = $i;
SQL
}

mariadb_client() {  # input output: one client's session, bounded
  timeout "$limit" mariadb --no-defaults --socket="$tmp/db/sock" -u "$me" --batch --skip-column-names \
    --connect-timeout=10 w < "$1" > "$2" 2>&1
}

# mariadb_kill WHAT: says what went wrong (a hang, mostly), describes the
# server's kernel threads and kills it by its PID.
mariadb_kill() {
  echo "real_programs: mariadb, $1:"
  tasks "$server"
  kill -KILL "$server" 2> /dev/null
  wait "$server" 2> /dev/null
  server=
  tail -5 "$tmp/db/err.log" "$tmp/db/out" 2> /dev/null
}

# mariadb_run plain|SETTING: one run; its results in $tmp/db.out, the
# server's log in $tmp/db/err.log. Returns 0, 1 (it failed: said why) or
# 124 (something hung: said what, and the server is killed).
mariadb_run() {
  local way=$1 i rc deadline
  rm -rf "$tmp/db"
  mkdir "$tmp/db"
  cp -a "$tmp/template" "$tmp/db/data"
  local args=(--no-defaults --datadir="$tmp/db/data" --socket="$tmp/db/sock" --skip-networking --user="$me"
              --pid-file="$tmp/db/pid" --log-error="$tmp/db/err.log")
  if [ "$way" = plain ]; then
    "$mariadbd" "${args[@]}" < /dev/null > "$tmp/db/out" 2>&1 &
  else
    # shellcheck disable=SC2046  # loom_env's words are env's arguments
    env $(loom_env "$way") LD_PRELOAD="$lib" LOOM_PTHREAD_STATS=1 "$mariadbd" "${args[@]}" < /dev/null > "$tmp/db/out" 2>&1 &
  fi
  server=$!
  deadline=$((SECONDS + limit))
  until timeout 5 mariadb-admin --no-defaults --socket="$tmp/db/sock" -u "$me" ping > /dev/null 2>&1; do
    if ! kill -0 "$server" 2> /dev/null; then
      wait "$server"
      echo "real_programs: mariadb: the server exited ($?) before it answered:"
      tail -20 "$tmp/db/err.log" "$tmp/db/out"
      server=
      return 1
    fi
    [ $SECONDS -ge $deadline ] && { mariadb_kill "the server did not answer in $limit s"; return 124; }
    sleep 0.1
  done
  printf '%s\n' "CREATE DATABASE w;" "USE w;" \
    "CREATE TABLE shared (client INT, k INT, v VARCHAR(64), PRIMARY KEY (client, k)) ENGINE=InnoDB;" \
    "CREATE TABLE counter (id INT PRIMARY KEY, n INT) ENGINE=InnoDB;" "INSERT INTO counter VALUES (1, 0);" \
    > "$tmp/db/setup.sql"
  timeout "$limit" mariadb --no-defaults --socket="$tmp/db/sock" -u "$me" < "$tmp/db/setup.sql" > "$tmp/db/setup.out" 2>&1
  rc=$?
  [ $rc -eq 124 ] && { mariadb_kill "the set-up client did not finish in $limit s"; return 124; }
  [ $rc -eq 0 ] || { cat "$tmp/db/setup.out"; mariadb_kill "the set-up client failed ($rc)"; return 1; }
  local pids=()
  for ((i = 1; i <= clients; i++)); do
    mariadb_sql $i > "$tmp/db/c$i.sql"
    mariadb_client "$tmp/db/c$i.sql" "$tmp/db/c$i.out" &
    pids+=($!)
  done
  local bad=0
  for ((i = 1; i <= clients; i++)); do
    wait "${pids[$((i - 1))]}"
    rc=$?
    [ $rc -eq 124 ] && bad=124
    [ $rc -ne 0 ] && [ $bad -eq 0 ] && bad=$rc
  done
  [ $bad -eq 124 ] && { mariadb_kill "a client did not finish in $limit s"; return 124; }
  [ $bad -ne 0 ] && { tail -3 "$tmp"/db/c*.out; echo "real_programs: mariadb: a client failed ($bad)"; }
  printf '%s\n' \
    "SELECT 'shared', COUNT(*), SUM(k), MD5(GROUP_CONCAT(client, ':', k, ':', v ORDER BY client, k)) FROM shared;" \
    "SELECT 'counter', n FROM counter;" \
    "SELECT 'tables', COUNT(*) FROM information_schema.tables WHERE table_schema = 'w';" > "$tmp/db/final.sql"
  mariadb_client "$tmp/db/final.sql" "$tmp/db/final.out"
  rc=$?
  [ $rc -eq 124 ] && { mariadb_kill "the last client did not finish in $limit s"; return 124; }
  [ $rc -ne 0 ] && [ $bad -eq 0 ] && { cat "$tmp/db/final.out"; echo "real_programs: mariadb: the last client failed ($rc)"; bad=$rc; }
  timeout "$limit" mariadb-admin --no-defaults --socket="$tmp/db/sock" -u "$me" shutdown > "$tmp/db/shutdown.out" 2>&1
  deadline=$((SECONDS + limit))
  while kill -0 "$server" 2> /dev/null && [ "$(sed 's/.*) \(.\).*/\1/' "/proc/$server/stat" 2> /dev/null)" != Z ]; do
    [ $SECONDS -ge $deadline ] && { mariadb_kill "the server did not stop in $limit s"; return 124; }
    sleep 0.1
  done
  wait "$server"
  rc=$?
  server=
  cat "$tmp"/db/c*.out "$tmp/db/final.out" > "$tmp/db.out"
  echo "server exit $rc" >> "$tmp/db.out"
  [ $bad -eq 0 ]
}

mariadb_check() {
  local name="mariadb ($clients clients)" start=$SECONDS p i rc n bad min=$((clients + 4))
  bounded "$limit" "$tmp/install.out" "$tmp/install.err" mariadb-install-db --no-defaults --user="$me" \
    --datadir="$tmp/template" --auth-root-authentication-method=socket --skip-test-db
  rc=$?
  if [ $rc -ne 0 ]; then
    tail -20 "$tmp/install.out" "$tmp/install.err"
    echo "real_programs: mariadb: mariadb-install-db failed ($rc)"
    fail=1
    return
  fi
  start=$SECONDS
  if ! mariadb_run plain; then
    echo "real_programs: $name: the plain run failed"
    fail=1
    return
  fi
  mv "$tmp/db.out" "$tmp/db.plain"
  echo "real_programs: $name: plain run $((SECONDS - start)) s: $(grep -E "^(shared|counter|server)" "$tmp/db.plain" | tr '\n\t' '  ')"
  grep -q '^server exit 0$' "$tmp/db.plain" || { echo "real_programs: $name: the plain server did not exit 0"; fail=1; }
  for p in "${settings[@]}"; do
    bad=0
    for ((i = 0; i < runs; i++)); do
      start=$SECONDS
      rm -f "$tmp/db.out"
      mariadb_run "$p"
      rc=$?
      n=$(fibres_ran "$tmp/db/err.log")
      if [ $rc -eq 124 ]; then
        echo "real_programs: $name, $(setting_name "$p"): hung"
        bad=1
      elif [ $rc -ne 0 ] || ! cmp -s "$tmp/db.plain" "$tmp/db.out" || [ -z "$n" ] || [ "$n" -lt $min ]; then
        echo "real_programs: $name, $(setting_name "$p"): differs (${n:-no} threads ran as fibres, at least $min expected):"
        diff "$tmp/db.plain" "$tmp/db.out" 2>&1 | head -5
        tail -5 "$tmp/db/err.log"
        bad=1
      else
        echo "real_programs: $name, $(setting_name "$p"): as plain, $n threads as fibres ($((SECONDS - start)) s)"
      fi
      [ $bad -ne 0 ] && break
    done
    [ $bad -ne 0 ] && fail=1
  done
  ran=$((ran + 1))
}
