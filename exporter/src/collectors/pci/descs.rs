//! The metrics the pci collector emits: one descriptor each, and the list of them all.

use crate::metrics::Desc;

pub(super) const DEVICE_INFO: Desc = Desc::gauge(
    "hpcnode_pci_device_info",
    "PCI device identity: ids, class, driver, IOMMU group, NUMA node, physical function and the type Nova reports.",
    None,
);
pub(super) const DRIVER_BOUND: Desc = Desc::gauge(
    "hpcnode_pci_driver_bound",
    "1 when a driver is bound to the device, else 0.",
    None,
);
pub(super) const MEMORY_DECODE: Desc = Desc::gauge(
    "hpcnode_pci_memory_decode_enabled",
    "Memory Space Enable of the command register (lspci shows [disabled] when 0).",
    None,
);
pub(super) const BARS: Desc = Desc::gauge(
    "hpcnode_pci_bars",
    "Implemented BARs by state: assigned (an address in resource) or unassigned (all-zero start).",
    None,
);
pub(super) const IRQ: Desc = Desc::gauge(
    "hpcnode_pci_irq",
    "The device's irq attribute: 0 or 255 mean no interrupt assigned yet.",
    None,
);
pub(super) const INTERRUPT_CAPABILITY: Desc = Desc::gauge(
    "hpcnode_pci_interrupt_capability_enabled",
    "For each message interrupt capability the device has (msi, msix): 1 when enabled.",
    None,
);
pub(super) const MSIX_TABLE_SIZE: Desc = Desc::gauge(
    "hpcnode_pci_msix_table_size",
    "Entries of the MSI-X table.",
    None,
);
pub(super) const LINK_SPEED: Desc = Desc::gauge(
    "hpcnode_pci_link_speed",
    "PCIe link speed, current or maximum, in transfers per second.",
    Some("transfers_per_second"),
);
pub(super) const LINK_WIDTH: Desc = Desc::gauge(
    "hpcnode_pci_link_width",
    "PCIe link width in lanes, current or maximum.",
    None,
);
pub(super) const POWER_STATE: Desc = Desc::gauge(
    "hpcnode_pci_power_state_id",
    "Power state: 0 D0, 1 D1, 2 D2, 3 D3hot, 4 D3cold.",
    None,
);
pub(super) const SRIOV_TOTAL_VFS: Desc = Desc::gauge(
    "hpcnode_pci_sriov_total_vfs",
    "Virtual functions the device supports (present only with an SR-IOV capability).",
    None,
);
pub(super) const SRIOV_VFS: Desc = Desc::gauge(
    "hpcnode_pci_sriov_vfs",
    "Virtual functions currently enabled.",
    None,
);
pub(super) const CONFIG_READABLE: Desc = Desc::gauge(
    "hpcnode_pci_config_space_readable",
    "Bytes of configuration space the exporter could read: 64 without root, so no MSI, MSI-X, link or SR-IOV from config space.",
    Some("bytes"),
);
pub(super) const DEVICE_FAULT: Desc = Desc::gauge(
    "hpcnode_pci_device_fault",
    "1 when the fault is present: bars_unassigned; under a host driver also memory_decode_disabled, irq_unassigned (with no MSI/MSI-X enabled), low_power_state (D3).",
    None,
);
pub(super) const PASSTHROUGH_READY: Desc = Desc::gauge(
    "hpcnode_pci_passthrough_ready",
    "For a device meant for passthrough (vfio-pci, Nova device_spec, --collector.pci.passthrough-device): 1 when every check passes.",
    None,
);
pub(super) const PASSTHROUGH_CHECK: Desc = Desc::gauge(
    "hpcnode_pci_passthrough_check",
    "One passthrough check of a device meant for passthrough: present, iommu_enabled, vfio_bound, group_isolated, bars_assigned.",
    None,
);
pub(super) const UNBOUND_ALIAS_MODULES: Desc = Desc::gauge(
    "hpcnode_pci_unbound_device_alias_modules",
    "For a device without a driver: how many modules' modules.alias entries match its modalias.",
    None,
);
pub(super) const UNBOUND_ALIAS_MODULE: Desc = Desc::gauge(
    "hpcnode_pci_unbound_device_alias_module",
    "For a device without a driver: one series per module whose alias matches, with its modprobe.d install command and blacklisting.",
    None,
);
pub(super) const AER_ERRORS: Desc = Desc::counter(
    "hpcnode_pci_aer_errors",
    "PCIe AER errors the kernel handled for the device (aer_dev_correctable, aer_dev_nonfatal, aer_dev_fatal), by severity and error bit as the kernel names it; until the device is removed or the node reboots.",
    None,
);
pub(super) const AER_MESSAGES: Desc = Desc::counter(
    "hpcnode_pci_aer_messages",
    "PCIe AER error messages (ERR_COR, ERR_NONFATAL, ERR_FATAL) the kernel handled for the device, by severity: the TOTAL_ERR_* line of aer_dev_*. One message can carry several error bits.",
    None,
);
pub(super) const AER_ROOT_PORT_MESSAGES: Desc = Desc::counter(
    "hpcnode_pci_aer_root_port_messages",
    "PCIe AER error messages a root port above a device of interest received from itself and the devices below it, by severity (aer_rootport_total_err_*).",
    None,
);
pub(super) const IOMMU_ENABLED: Desc = Desc::gauge(
    "hpcnode_iommu_enabled",
    "1 when an IOMMU is active (/sys/class/iommu has an entry), else 0.",
    None,
);
pub(super) const IOMMU_UNITS: Desc = Desc::gauge(
    "hpcnode_iommu_hardware_units",
    "Entries of /sys/class/iommu (dmar0, ivhd0, ...).",
    None,
);
pub(super) const IOMMU_KERNEL_PARAMETER: Desc = Desc::gauge(
    "hpcnode_iommu_kernel_parameter_info",
    "IOMMU-related kernel command line parameters present (intel_iommu, amd_iommu, iommu, vfio-pci.ids) and their values.",
    None,
);
pub(super) const IOMMU_GROUP_DEVICES: Desc = Desc::gauge(
    "hpcnode_iommu_group_devices",
    "Devices in each IOMMU group, with the group's domain type.",
    None,
);
pub(super) const VFIO_DEVICE_HOLDERS: Desc = Desc::gauge(
    "hpcnode_pci_vfio_device_holders",
    "Processes holding a device bound to vfio-pci open (its vfio group or cdev): 0 is a device waiting for a VM.",
    None,
);
pub(super) const VFIO_HOLDER_INFO: Desc = Desc::gauge(
    "hpcnode_pci_vfio_holder_info",
    "A process holding a device bound to vfio-pci: pid, command name and, for QEMU, the guest name and UUID from its command line.",
    None,
);
pub(super) const VFIO_STALE_HOLDER_INFO: Desc = Desc::gauge(
    "hpcnode_pci_vfio_stale_holder_info",
    "A process holding a vfio group or device node whose device is no longer bound to vfio-pci (removed, or rebound to a host driver).",
    None,
);
pub(super) const VFIO_UNREADABLE_PROCESSES: Desc = Desc::gauge(
    "hpcnode_pci_vfio_holder_unreadable_processes",
    "Processes whose open files the exporter could not read while looking for vfio holders (another user's, without CAP_SYS_PTRACE): their holds are not reported.",
    None,
);
pub(super) const VFIO_HOLDER_SCAN_COMPLETE: Desc = Desc::gauge(
    "hpcnode_pci_vfio_holder_scan_complete",
    "1: the vfio holder scan saw every process's open files, or had nothing to scan (no vfio file open anywhere); 0: it stopped at its budget of descriptors, so holders may be missing.",
    None,
);
pub(super) const VFIO_HOLDERS_FROM_EVENTS: Desc = Desc::gauge(
    "hpcnode_pci_vfio_holders_from_events",
    "1: this scrape read only the processes the vfio_holders eBPF probe recorded opening, receiving or inheriting a vfio file since a scan after it attached; 0: every process's open files were scanned, or none (no vfio file open).",
    None,
);
pub(super) const VFIO_UNPROVEN_HOLDS: Desc = Desc::gauge(
    "hpcnode_pci_vfio_unproven_holds",
    "Open descriptors named like a vfio group or device node whose open file is not that device, by reason: not counted as holds.",
    None,
);
pub(super) const VFIO_MODULE_LOADED: Desc = Desc::gauge(
    "hpcnode_vfio_module_loaded",
    "1 when the vfio module is loaded (or built in with parameters), from /sys/module.",
    None,
);
pub(super) const NOVA_CONFIG_VALID: Desc = Desc::gauge(
    "hpcnode_nova_config_valid",
    "1 when the Nova config file was read and Nova would accept every [pci] device_spec and alias in it.",
    None,
);
pub(super) const NOVA_CONFIG_ERRORS: Desc = Desc::gauge(
    "hpcnode_nova_config_errors",
    "Why a Nova config file is not valid, by reason: unreadable, invalid_device_spec, invalid_alias, conflicting_alias, too_many_values (values that do not count).",
    None,
);
pub(super) const NOVA_SPEC_DEVICES: Desc = Desc::gauge(
    "hpcnode_nova_device_spec_matching_devices",
    "Present PCI devices matched by each Nova device_spec.",
    None,
);
pub(super) const NOVA_ALIAS_DEVICES: Desc = Desc::gauge(
    "hpcnode_nova_alias_matching_devices",
    "Devices Nova could allocate for each alias: matched by a device_spec, the alias's ids and its device_type.",
    None,
);
pub(super) const NOVA_ALIAS_MISMATCH: Desc = Desc::gauge(
    "hpcnode_nova_alias_type_mismatch_devices",
    "Devices matched by a device_spec and an alias's ids whose Nova type the alias does not allocate.",
    None,
);
pub(super) const NOVA_ALIAS_DEFINITIONS: Desc = Desc::gauge(
    "hpcnode_nova_alias_definitions",
    "Distinct definitions of each Nova alias across the config files given: more than 1 when the API, scheduler and compute files disagree.",
    None,
);
pub(super) const NOVA_SCHEDULER_PCI_FILTER: Desc = Desc::gauge(
    "hpcnode_nova_scheduler_pci_filter_enabled",
    "1 when nova-scheduler's [filter_scheduler] enabled_filters includes PciPassthroughFilter, from the files given with --collector.pci.nova-scheduler-config.",
    None,
);

/// Every metric this collector emits (for the METRICS.md check).
pub const METRICS: [Desc; 40] = [
    DEVICE_INFO,
    DRIVER_BOUND,
    MEMORY_DECODE,
    BARS,
    IRQ,
    INTERRUPT_CAPABILITY,
    MSIX_TABLE_SIZE,
    LINK_SPEED,
    LINK_WIDTH,
    POWER_STATE,
    SRIOV_TOTAL_VFS,
    SRIOV_VFS,
    CONFIG_READABLE,
    DEVICE_FAULT,
    PASSTHROUGH_READY,
    PASSTHROUGH_CHECK,
    UNBOUND_ALIAS_MODULES,
    UNBOUND_ALIAS_MODULE,
    AER_ERRORS,
    AER_MESSAGES,
    AER_ROOT_PORT_MESSAGES,
    IOMMU_ENABLED,
    IOMMU_UNITS,
    IOMMU_KERNEL_PARAMETER,
    IOMMU_GROUP_DEVICES,
    VFIO_MODULE_LOADED,
    VFIO_DEVICE_HOLDERS,
    VFIO_HOLDER_INFO,
    VFIO_STALE_HOLDER_INFO,
    VFIO_UNREADABLE_PROCESSES,
    VFIO_HOLDER_SCAN_COMPLETE,
    VFIO_HOLDERS_FROM_EVENTS,
    VFIO_UNPROVEN_HOLDS,
    NOVA_CONFIG_VALID,
    NOVA_CONFIG_ERRORS,
    NOVA_SPEC_DEVICES,
    NOVA_ALIAS_DEVICES,
    NOVA_ALIAS_MISMATCH,
    NOVA_ALIAS_DEFINITIONS,
    NOVA_SCHEDULER_PCI_FILTER,
];
