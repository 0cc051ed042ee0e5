# The incident of issue 40 on a real dynamic linker: rdma-core 44's libibverbs in the multiarch
# directory (tools=verbs), then rdma-core 33's copy placed in /usr/local/lib64, that directory
# listed in ld.so.conf.d and the cache rebuilt by glibc's own ldconfig: the linker now takes the
# stale copy (ldconfig -p and ld.so's own trace say so), and so does the exporter, with two
# versions on the library path (HpcnodeRdmaStaleUserspaceLibrary's condition). Removing the
# stale copy and running ldconfig again gives one copy, the new one, on the next scrape.
# rxe0's provider: it loads with the new libibverbs, not with the stale one (another private
# ABI); moved out of the provider directory, it is missing and, after a restart (libibverbs
# loads providers once per process), the exporter's own libibverbs no longer lists rxe0 while
# sysfs has it.
# lab: modules=rdma_rxe ib_uverbs rdma_ucm crc32_generic dummy
# lab: tools=verbs ldconfig
# lab: collectors=rdma_userspace verbs
# lab: timeout=240

library='library="libibverbs.so.1"'
info="hpcnode_rdma_userspace_library_info{$library}"
copies="hpcnode_rdma_userspace_library_copies{$library}"
multiarch=/usr/lib/x86_64-linux-gnu/libibverbs.so.1
stale=/usr/local/lib64/libibverbs.so.1
# The versions of the library among its copies, one a line (the alert counts them).
versions() { lab_matching "$1" "$info" | sed -n 's/.*version="\([^"]*\)".*/\1/p' | sort -u; }
# The path of the copy marked resolved.
resolved() {
  lab_matching "$1" "hpcnode_rdma_userspace_library_info{$library,resolved=\"1\"}" |
    sed -n 's/.*path="\([^"]*\)".*/\1/p'
}
# lab_same CHECK ACTUAL WANTED: a text compared as text.
lab_same() {
  if [ "$2" = "$3" ]; then lab_pass "$1 ($2)"; else lab_fail "$1" "got '$2', want '$3'"; fi
}
# What the dynamic linker itself loads for an application (ld.so's trace, as ldd prints it).
linker_takes() { LD_TRACE_LOADED_OBJECTS=1 /usr/bin/ibv_devinfo | sed -n 's/^\tlibibverbs.so.1 => \([^ ]*\) .*/\1/p'; }

provider='hpcnode_rdma_device_provider{device="rxe0",provider="rxe"'
visible='hpcnode_rdma_device_visible_to_verbs{device="rxe0"}'
provider_file=/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
EXPORTER="--collector.disable-defaults --collector.rdma_userspace --collector.verbs"

lab_scenario one_copy
lab_softroce_up
# shellcheck disable=SC2086 # flags are words
lab_exporter_start $EXPORTER || exit 1
lab_scrape one
lab_expect "one copy of libibverbs.so.1" "$(lab_value one "$copies")" == 1
lab_same "rdma-core 44's" "$(versions one)" 1.14.44.0
lab_same "the linker's copy is the multiarch one" "$(linker_takes)" "$multiarch"
lab_same "and so is the exporter's resolved copy" "$(resolved one)" "$multiarch"
lab_expect "rxe0's provider loads" "$(lab_value one "$provider,status=\"ok\"}")" == 1
lab_expect "the exporter's libibverbs lists rxe0" "$(lab_value one "$visible")" == 1

lab_scenario stale_copy
mkdir -p /usr/local/lib64 /etc/ld.so.conf.d
cp /opt/lab-stale/libibverbs.so.1.11.33.2 /usr/local/lib64/
ln -sf libibverbs.so.1.11.33.2 $stale
echo 'include /etc/ld.so.conf.d/*.conf' > /etc/ld.so.conf
echo /usr/local/lib64 > /etc/ld.so.conf.d/site.conf
lab_check "ldconfig rebuilds the cache" ldconfig
lab_same "ldconfig -p lists the stale copy first" \
  "$(ldconfig -p | sed -n 's/^\tlibibverbs.so.1 (libc6,x86-64) => //p' | head -n1)" "$stale"
lab_same "the linker now takes the stale copy" "$(linker_takes)" "$stale"
lab_scrape stale
lab_expect "two copies" "$(lab_value stale "$copies")" == 2
lab_expect "two versions: the stale-library alert's condition" "$(versions stale | wc -l)" == 2
lab_same "the exporter's resolved copy is the linker's" "$(resolved stale)" "$stale"
lab_expect "rdma-core 44's rxe provider does not load into rdma-core 33's libibverbs" \
  "$(lab_value stale "$provider,status=\"abi_mismatch\"}")" == 1

lab_scenario removed
rm /usr/local/lib64/libibverbs.so.1.11.33.2 $stale
lab_check "ldconfig again" ldconfig
lab_same "the linker takes the new copy again" "$(linker_takes)" "$multiarch"
lab_scrape removed
lab_expect "one copy again" "$(lab_value removed "$copies")" == 1
lab_same "the resolved copy is the multiarch one" "$(resolved removed)" "$multiarch"
lab_expect "rxe0's provider loads again" "$(lab_value removed "$provider,status=\"ok\"}")" == 1
lab_expect "no collector errors" "$(lab_value removed hpcnode_collector_errors_total)" == 0

lab_scenario provider_removed
mv $provider_file /tmp/
# shellcheck disable=SC2086 # flags are words
lab_exporter_start $EXPORTER || exit 1
lab_scrape no_provider
lab_expect "rxe0's provider is missing" "$(lab_value no_provider "$provider,status=\"missing\"}")" == 1
lab_expect "the exporter's libibverbs no longer lists rxe0" "$(lab_value no_provider "$visible")" == 0
lab_check "while sysfs has it" test -e /sys/class/infiniband/rxe0
mv /tmp/librxe-rdmav34.so $provider_file
lab_exporter_stop
