/*
 * A stand-in for Intel's libmicmgmt.so.0 (MPSS 3.x), for tests/it/mic.rs: the functions the mic
 * collector calls, with the prototypes of MPSS's miclib.h, answering with the readings of the
 * real `micinfo` capture in shared/samples (micinfo-mpss3.8.2-x100-7120P.txt: die 50 C, cores
 * 1041000 uV and 1238095 kHz, GDDR 1501000 uV) and the real micras power capture A
 * (micras-power-knc.txt). The other temperatures are those of the derived micras format sheet.
 *
 * Every handle is checked: a call with a handle this library did not hand out, or one already
 * freed, fails with E_MIC_INVAL, and so does asking again for a list, device or info structure
 * that was never freed or closed, so a collector that misuses the API (or leaks) shows errors
 * from its next scrape on.
 *
 * Build: gcc -shared -fPIC -o libmicmgmt.so.0 fake_libmicmgmt.c
 * -DWITHOUT_CORES_FREQUENCY leaves out mic_get_cores_frequency (a library missing a symbol);
 * -DHANG_IN_THERMAL makes mic_get_thermal_info never return (a card that stopped answering SCIF).
 */
#include <stdint.h>
#include <stddef.h>
#include <unistd.h>

enum { E_MIC_SUCCESS = 0, E_MIC_INVAL = 1, E_MIC_NOENT = 3 };

struct mic_devices_list { int live; };
struct mic_device { int live; uint32_t number; };
struct mic_thermal_info { int live; };
struct mic_power_util_info { int live; };
struct mic_cores_info { int live; };
struct mic_device_mem { int live; };

/* Two cards, mic0 and mic1, as on the MPSS 3 fixture host. */
static const int cards[] = {0, 1};
static struct mic_devices_list devices_list;
static struct mic_device devices[2];
static struct mic_thermal_info thermal_info;
static struct mic_power_util_info power_info;
static struct mic_cores_info cores_info;
static struct mic_device_mem memory_info;

#define LIVE(p) ((p) != NULL && (p)->live)

int mic_get_devices(struct mic_devices_list **list)
{
	if (list == NULL || devices_list.live)
		return E_MIC_INVAL;
	devices_list.live = 1;
	*list = &devices_list;
	return E_MIC_SUCCESS;
}

int mic_free_devices(struct mic_devices_list *list)
{
	if (list != &devices_list || !LIVE(list))
		return E_MIC_INVAL;
	list->live = 0;
	return E_MIC_SUCCESS;
}

int mic_get_ndevices(struct mic_devices_list *list, int *n)
{
	if (list != &devices_list || !LIVE(list) || n == NULL)
		return E_MIC_INVAL;
	*n = sizeof(cards) / sizeof(cards[0]);
	return E_MIC_SUCCESS;
}

int mic_get_device_at_index(struct mic_devices_list *list, int index, int *device)
{
	if (list != &devices_list || !LIVE(list) || device == NULL || index < 0 || index > 1)
		return E_MIC_INVAL;
	*device = cards[index];
	return E_MIC_SUCCESS;
}

int mic_open_device(struct mic_device **device, uint32_t number)
{
	if (device == NULL)
		return E_MIC_INVAL;
	if (number > 1)
		return E_MIC_NOENT;
	if (devices[number].live)
		return E_MIC_INVAL;
	devices[number].live = 1;
	devices[number].number = number;
	*device = &devices[number];
	return E_MIC_SUCCESS;
}

int mic_close_device(struct mic_device *device)
{
	if (!LIVE(device))
		return E_MIC_INVAL;
	device->live = 0;
	return E_MIC_SUCCESS;
}

/* An info structure is handed out for an open device and checked in every getter. */
#define GET_INFO(name, type, object)                                  \
	int name(struct mic_device *device, struct type **out)        \
	{                                                             \
		if (!LIVE(device) || out == NULL || object.live)      \
			return E_MIC_INVAL;                           \
		object.live = 1;                                      \
		*out = &object;                                       \
		return E_MIC_SUCCESS;                                 \
	}
#define FREE_INFO(name, type)                                         \
	int name(struct type *info)                                   \
	{                                                             \
		if (!LIVE(info))                                      \
			return E_MIC_INVAL;                           \
		info->live = 0;                                       \
		return E_MIC_SUCCESS;                                 \
	}
#define READING(name, type, value_type, value)                        \
	int name(struct type *info, value_type *out)                  \
	{                                                             \
		if (!LIVE(info) || out == NULL)                       \
			return E_MIC_INVAL;                           \
		*out = (value);                                       \
		return E_MIC_SUCCESS;                                 \
	}

#ifdef HANG_IN_THERMAL
int mic_get_thermal_info(struct mic_device *device, struct mic_thermal_info **out)
{
	(void)device;
	*out = &thermal_info;
	for (;;)
		pause();
}
#else
GET_INFO(mic_get_thermal_info, mic_thermal_info, thermal_info)
#endif
FREE_INFO(mic_free_thermal_info, mic_thermal_info)
READING(mic_get_die_temp, mic_thermal_info, uint32_t, 50)
READING(mic_get_gddr_temp, mic_thermal_info, uint16_t, 45)
READING(mic_get_fanin_temp, mic_thermal_info, uint16_t, 30)
READING(mic_get_fanout_temp, mic_thermal_info, uint16_t, 42)
READING(mic_get_vccp_temp, mic_thermal_info, uint16_t, 44)
READING(mic_get_vddg_temp, mic_thermal_info, uint16_t, 40)
READING(mic_get_vddq_temp, mic_thermal_info, uint16_t, 41)
READING(mic_is_die_temp_valid, mic_thermal_info, int, 1)
READING(mic_is_gddr_temp_valid, mic_thermal_info, int, 1)
READING(mic_is_fanin_temp_valid, mic_thermal_info, int, 1)
READING(mic_is_fanout_temp_valid, mic_thermal_info, int, 1)
READING(mic_is_vccp_temp_valid, mic_thermal_info, int, 1)
READING(mic_is_vddg_temp_valid, mic_thermal_info, int, 1)
/* The vddq regulator's sensor reads as unavailable. */
READING(mic_is_vddq_temp_valid, mic_thermal_info, int, 0)

GET_INFO(mic_get_power_utilization_info, mic_power_util_info, power_info)
FREE_INFO(mic_free_power_utilization_info, mic_power_util_info)
READING(mic_get_total_power_readings_w0, mic_power_util_info, uint32_t, 115000000)
READING(mic_get_total_power_readings_w1, mic_power_util_info, uint32_t, 113000000)
READING(mic_get_inst_power_readings, mic_power_util_info, uint32_t, 113000000)
READING(mic_get_pcie_power_readings, mic_power_util_info, uint32_t, 38000000)
READING(mic_get_c2x3_power_readings, mic_power_util_info, uint32_t, 29000000)
READING(mic_get_c2x4_power_readings, mic_power_util_info, uint32_t, 46000000)
READING(mic_get_vccp_power_readings, mic_power_util_info, uint32_t, 0)
READING(mic_get_vccp_current_readings, mic_power_util_info, uint32_t, 0)
READING(mic_get_vccp_voltage_readings, mic_power_util_info, uint32_t, 1033000)
READING(mic_get_vddg_power_readings, mic_power_util_info, uint32_t, 0)
READING(mic_get_vddg_current_readings, mic_power_util_info, uint32_t, 0)
READING(mic_get_vddg_voltage_readings, mic_power_util_info, uint32_t, 1501000)
READING(mic_get_vddq_power_readings, mic_power_util_info, uint32_t, 0)
READING(mic_get_vddq_current_readings, mic_power_util_info, uint32_t, 0)
READING(mic_get_vddq_voltage_readings, mic_power_util_info, uint32_t, 1000000)

GET_INFO(mic_get_cores_info, mic_cores_info, cores_info)
FREE_INFO(mic_free_cores_info, mic_cores_info)
READING(mic_get_cores_voltage, mic_cores_info, uint32_t, 1041000)
#ifndef WITHOUT_CORES_FREQUENCY
READING(mic_get_cores_frequency, mic_cores_info, uint32_t, 1238095)
#endif

GET_INFO(mic_get_memory_info, mic_device_mem, memory_info)
FREE_INFO(mic_free_memory_info, mic_device_mem)
READING(mic_get_memory_voltage, mic_device_mem, uint32_t, 1501000)
