# qemu's edu device (1234:11e8) as a source of real DMA (source after lib.sh): $edu is its sysfs
# directory (empty when absent). Its DMA registers (qemu docs/specs/edu.rst): 0x80 source, 0x88
# destination, 0x90 count, 0x98 command (bit 0 start, bit 1 edu to RAM); its own buffer is at
# 0x40000.
edu=
for dir in /sys/bus/pci/devices/*; do
  [ "$(cat "$dir/vendor"):$(cat "$dir/device")" = 0x1234:0x11e8 ] && edu=$dir
done

edu_bar0() { awk 'NR == 1 { print $1; exit }' "$edu/resource"; }
edu_dma() { # SOURCE DESTINATION COMMAND
  local bar0
  bar0=$(edu_bar0)
  devmem $((bar0 + 0x80)) 32 "$1" && devmem $((bar0 + 0x88)) 32 "$2" &&
    devmem $((bar0 + 0x90)) 32 4 && devmem $((bar0 + 0x98)) 32 "$3"
}
dma_done() { [ $(($(devmem $(($(edu_bar0) + 0x98)) 32) & 1)) = 0 ]; }

# Enables edu with memory decode and bus mastering; prints its PCI command register after.
edu_enable_dma() {
  local command
  echo 1 > "$edu/enable"
  command=$(dd if="$edu/config" bs=1 skip=4 count=1 2>/dev/null | od -An -tu1)
  # shellcheck disable=SC2059 # the format is the octal escape of the byte to write
  printf "\\$(printf %o $((command | 6)))" | dd of="$edu/config" bs=1 seek=4 count=1 conv=notrunc 2>/dev/null
  dd if="$edu/config" bs=1 skip=4 count=1 2>/dev/null | od -An -tu1
}

# Binds edu to vfio-pci, checking each step; sets $address and $group (its IOMMU group, whose
# /dev/vfio node a VMM opens). Fails at the first failed check.
edu_bind_vfio() {
  lab_check "edu device present" test -n "$edu" || return 1
  address=$(basename "$edu")
  group=$(basename "$(readlink "$edu/iommu_group")")
  lab_check "modprobe vfio-pci" modprobe vfio-pci || return 1
  echo vfio-pci > "$edu/driver_override"
  [ -e "$edu/driver" ] || echo "$address" > /sys/bus/pci/drivers_probe
  lab_check "edu bound to vfio-pci" lab_wait_until 10 test -e "/sys/bus/pci/drivers/vfio-pci/$address" || return 1
  lab_check "/dev/vfio/$group exists" test -e "/dev/vfio/$group"
}

# Gives edu back to no driver, for the groups after.
edu_unbind_vfio() {
  echo "$address" > /sys/bus/pci/drivers/vfio-pci/unbind
  echo > "$edu/driver_override"
}
