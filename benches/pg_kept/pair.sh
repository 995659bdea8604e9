#!/bin/bash
# Kept counts on PostgreSQL, what they cost the workers (BENCHMARKS.md,
# "Dashboard on PostgreSQL: counts kept in the statements").
#
#   benches/pg_kept/pair.sh setup                 # a throwaway server, filled
#   benches/pg_kept/pair.sh BASE KEPT CLIENTS TURNS SECONDS
#   benches/pg_kept/pair.sh reads                 # the counts' reads at 1 000 000 jobs
#   benches/pg_kept/pair.sh stop
#
# A turn runs BASE and KEPT (pgbench scripts in this folder, without .sql)
# at the same time, CLIENTS connections each, so both see the same load
# on a shared VM; its ratio is KEPT's time per op over BASE's. Printed:
# each turn, then the median, the spread and the ratio of the totals.
# Run `pair.sh enq_base enq_base 1 8 4` (A/A) to see the method's noise.
set -e
export PATH=/usr/lib/postgresql/15/bin:$PATH
here=$(cd "$(dirname "$0")" && pwd)
dir=${DQUE_PG_KEPT_DIR:-/tmp/dque_pg_kept}
port=5499
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
psql_() { psql -h "$dir/sock" -p $port -U postgres -q "$@"; }
case "$1" in
setup)
    rm -rf "$dir"; mkdir -p "$dir/data" "$dir/sock"
    [ "$(id -u)" = 0 ] && chown -R postgres "$dir"
    as_pg initdb -D "$dir/data" -U postgres -A trust >/dev/null
    as_pg pg_ctl -D "$dir/data" -l "$dir/sock/log" -w start \
        -o "-k $dir/sock -p $port -c listen_addresses='' -c synchronous_commit=off" >/dev/null
    psql_ -f "$here/schema.sql"; psql_ -f "$here/fill.sql"
    for t in jobs jobsa jobsb; do psql_ -c "VACUUM ANALYZE dque.$t"; done
    exit ;;
stop) as_pg pg_ctl -D "$dir/data" -m fast stop; exit ;;
reads)
    for i in 1 2 3; do psql_ -f "$here/reads.sql" 2>&1 | grep -E '^==|^Time' | paste - -; done |
        awk -F'\t' '{a[$1] = a[$1] " " $2} END {for (k in a) print k ":" a[k]}'
    exit ;;
esac
base=$1; kept=$2; c=$3; n=$4; s=$5
run() {
    pgbench -h "$dir/sock" -p $port -U postgres -n -M prepared -T "$s" -c "$c" -j "$c" \
        -f "$here/$1.sql" postgres 2>&1 | awk '/^tps/ {print $3}'
}
for i in $(seq 1 "$n"); do
    run "$base" > "$dir/base.tps" & run "$kept" > "$dir/kept.tps"; wait
    echo "$(cat "$dir/base.tps") $(cat "$dir/kept.tps")"
done | python3 -c '
import sys, statistics
name = sys.argv[1]
rows = [tuple(map(float, l.split())) for l in sys.stdin if l.strip()]
r = sorted(b / k for b, k in rows)
for b, k in rows: print(f"{name}: base {b:.0f}/s kept {k:.0f}/s ratio {b / k:.3f}")
print(f"{name}: median {statistics.median(r):.3f}, spread {r[0]:.3f}..{r[-1]:.3f}, "
      f"totals {sum(b for b, _ in rows) / sum(k for _, k in rows):.3f}")' "$kept/$base c=$c"
