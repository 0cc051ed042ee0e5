//! libmicmgmt, the MPSS management library `micinfo` uses: loaded at run time (never linked)
//! and asked over SCIF for a host card's readings, one call at a time.

use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use super::{CardRead, SOURCE_LIBRARY};
use crate::collector::{CollectError, ErrorKind};
use crate::dynlib::{Library, LoadError};
use crate::logging::{self, Level};
use crate::sync::{lock, wait_while};

mod calls;

use calls::Calls;

const LIBRARY: &str = "libmicmgmt.so.0";

impl CardRead<'_> {
    /// Telemetry over SCIF for a host card; returns whether the card gave any reading.
    pub(super) fn library(&mut self, source: &LibrarySource, number: u32, online: bool) -> bool {
        let library = match source.load() {
            Ok(library) => library,
            Err(err) => {
                // The source is unavailable on this node, which is no read failure and no
                // collector error: the 0 in the metric says it every scrape, the log says why once.
                if !source.logged.swap(true, Ordering::Relaxed) {
                    logging::log(
                        Level::Warn,
                        "libmicmgmt unavailable; no card telemetry over SCIF",
                        &[("collector", "mic"), ("reason", &err.to_string())],
                    );
                }
                return false;
            }
        };
        // A card that is not up cannot answer over SCIF; its state says why.
        if !online {
            return false;
        }
        let Some(_turn) = source.calls.take() else {
            self.error(LibraryError::Busy);
            return false;
        };
        match library.open(number) {
            Ok(device) => {
                let answered = self.library_readings(library, &device);
                let code = device.close();
                if code != 0 {
                    self.error(LibraryError::Call {
                        call: "mic_close_device",
                        card: self.device.as_str().to_string(),
                        code,
                    });
                }
                answered
            }
            Err(err) => {
                self.error(err);
                false
            }
        }
    }

    /// Every reading the library gives for an open card; returns whether there was any.
    fn library_readings(&mut self, library: &MicLib, device: &OpenDevice) -> bool {
        let mut calls = Calls {
            card: self.device.as_str(),
            failures: Vec::new(),
            readings: Vec::new(),
        };
        // SAFETY: `device.handle` is an open device handle the library returned and has not
        // freed, and every function pointer in `library` has the prototype miclib.h declares
        // for its name.
        unsafe {
            calls.thermal(library, device.handle);
            calls.power(library, device.handle);
            calls.cores(library, device.handle);
            calls.memory(library, device.handle);
        }
        let Calls {
            failures, readings, ..
        } = calls;
        let answered = !readings.is_empty();
        for (desc, kind, value) in readings {
            self.reading(desc, kind, SOURCE_LIBRARY, value);
        }
        for failure in failures {
            self.error(failure);
        }
        answered
    }
}

/// Why libmicmgmt gave nothing (or not everything) for a card.
#[derive(Debug, thiserror::Error)]
enum LibraryError {
    #[error("{LIBRARY} not used: reading cards over SCIF needs root")]
    NotRoot,
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("{LIBRARY} does not list {0} among its devices")]
    NotListed(String),
    #[error("{LIBRARY} busy: a call for another card has not returned")]
    Busy,
    #[error("{LIBRARY} {call} for {card} failed with error {code}")]
    Call {
        call: &'static str,
        card: String,
        code: c_int,
    },
}

impl From<&LibraryError> for CollectError {
    fn from(err: &LibraryError) -> Self {
        let kind = match err {
            LibraryError::Busy => ErrorKind::StillRunning,
            _ => ErrorKind::Io,
        };
        CollectError::new(kind, err.to_string())
    }
}

impl From<LibraryError> for CollectError {
    fn from(err: LibraryError) -> Self {
        CollectError::from(&err)
    }
}

/// The library, loaded when the collector starts and kept for the process's life; a failure
/// to load is kept too, and logged by the first card read (a node without cards stays quiet).
pub(super) struct LibrarySource {
    loaded: Result<MicLib, LibraryError>,
    /// Whether the load failure has been logged.
    logged: AtomicBool,
    /// libmicmgmt keeps its error state in globals: one caller at a time.
    calls: Turn,
}

/// One caller at a time, and a bounded wait for the turn: a call that never returns (a card
/// that stopped answering over SCIF) holds its own card's read, not every other card's too.
struct Turn {
    taken: Mutex<bool>,
    freed: Condvar,
    wait: Duration,
}

/// The turn, given back on drop (a panic included).
struct TurnGuard<'t>(&'t Turn);

impl Turn {
    /// The turn, or `None` when it was not given back within the wait.
    fn take(&self) -> Option<TurnGuard<'_>> {
        // The flag is only ever set and cleared under the lock: a poisoned lock still holds it.
        let taken = lock(&self.taken);
        let mut taken = wait_while(&self.freed, taken, self.wait, |taken| *taken);
        if *taken {
            return None;
        }
        *taken = true;
        Some(TurnGuard(self))
    }
}

impl Drop for TurnGuard<'_> {
    fn drop(&mut self) {
        *lock(&self.0.taken) = false;
        self.0.freed.notify_one();
    }
}

impl LibrarySource {
    /// Loads the library (root only: it talks to the cards over SCIF); `wait` bounds how long
    /// a card read waits for its turn to call it.
    pub(super) fn start(wait: Duration) -> Self {
        // SAFETY: geteuid has no preconditions.
        let loaded = if unsafe { libc::geteuid() } != 0 {
            Err(LibraryError::NotRoot)
        } else {
            MicLib::load()
        };
        LibrarySource {
            loaded,
            logged: AtomicBool::new(false),
            calls: Turn {
                taken: Mutex::new(false),
                freed: Condvar::new(),
                wait,
            },
        }
    }

    fn load(&self) -> Result<&MicLib, &LibraryError> {
        self.loaded.as_ref()
    }
}

type Handle = *mut c_void;
type GetList = unsafe extern "C" fn(*mut Handle) -> c_int;
type Free = unsafe extern "C" fn(Handle) -> c_int;
type GetCount = unsafe extern "C" fn(Handle, *mut c_int) -> c_int;
type GetAtIndex = unsafe extern "C" fn(Handle, c_int, *mut c_int) -> c_int;
type Open = unsafe extern "C" fn(*mut Handle, u32) -> c_int;
type GetInfo = unsafe extern "C" fn(Handle, *mut Handle) -> c_int;
type GetU32 = unsafe extern "C" fn(Handle, *mut u32) -> c_int;
type GetU16 = unsafe extern "C" fn(Handle, *mut u16) -> c_int;

/// The die temperature is read as 32 bits, the others as 16 (miclib.h).
enum Temperature {
    Wide(GetU32),
    Narrow(GetU16),
}

struct TemperatureSensor {
    sensor: &'static str,
    read_call: &'static str,
    read: Temperature,
    valid_call: &'static str,
    valid: GetCount,
}

/// The libmicmgmt functions the collector calls, resolved once at load.
struct MicLib {
    get_devices: GetList,
    free_devices: Free,
    get_ndevices: GetCount,
    get_device_at_index: GetAtIndex,
    open_device: Open,
    close_device: Free,
    get_thermal_info: GetInfo,
    free_thermal_info: Free,
    temperatures: Vec<TemperatureSensor>,
    get_power_info: GetInfo,
    free_power_info: Free,
    /// Reading name, function name, reader.
    power: Vec<(&'static str, &'static str, GetU32)>,
    /// Per rail: power, current and voltage as (function name, reader).
    rails: Vec<(&'static str, [(&'static str, GetU32); 3])>,
    get_cores_info: GetInfo,
    free_cores_info: Free,
    cores_voltage: GetU32,
    cores_frequency: GetU32,
    get_memory_info: GetInfo,
    free_memory_info: Free,
    memory_voltage: GetU32,
    /// Keeps the function pointers above valid.
    _library: Library,
}

/// Temperature sensors libmicmgmt reads (it has no board sensor): micras name, reader, validity.
const LIBRARY_TEMPERATURES: [(&str, &str, &str); 7] = [
    ("die", "mic_get_die_temp", "mic_is_die_temp_valid"),
    ("gddr", "mic_get_gddr_temp", "mic_is_gddr_temp_valid"),
    ("fan_inlet", "mic_get_fanin_temp", "mic_is_fanin_temp_valid"),
    (
        "fan_outlet",
        "mic_get_fanout_temp",
        "mic_is_fanout_temp_valid",
    ),
    ("vccp", "mic_get_vccp_temp", "mic_is_vccp_temp_valid"),
    ("vddg", "mic_get_vddg_temp", "mic_is_vddg_temp_valid"),
    ("vddq", "mic_get_vddq_temp", "mic_is_vddq_temp_valid"),
];
const LIBRARY_POWER: [(&str, &str); 6] = [
    ("total_window0", "mic_get_total_power_readings_w0"),
    ("total_window1", "mic_get_total_power_readings_w1"),
    ("instantaneous", "mic_get_inst_power_readings"),
    ("pcie", "mic_get_pcie_power_readings"),
    ("connector_2x3", "mic_get_c2x3_power_readings"),
    ("connector_2x4", "mic_get_c2x4_power_readings"),
];
/// Per rail: power (uW), current (uA), voltage (uV) readers.
const LIBRARY_RAILS: [(&str, [&str; 3]); 3] = [
    (
        "vccp",
        [
            "mic_get_vccp_power_readings",
            "mic_get_vccp_current_readings",
            "mic_get_vccp_voltage_readings",
        ],
    ),
    (
        "vddg",
        [
            "mic_get_vddg_power_readings",
            "mic_get_vddg_current_readings",
            "mic_get_vddg_voltage_readings",
        ],
    ),
    (
        "vddq",
        [
            "mic_get_vddq_power_readings",
            "mic_get_vddq_current_readings",
            "mic_get_vddq_voltage_readings",
        ],
    ),
];

impl MicLib {
    fn load() -> Result<MicLib, LibraryError> {
        // SAFETY: loading runs the library's initialisers; libmicmgmt's only set up its state.
        let library = unsafe { Library::open(LIBRARY) }?;
        let lib = &library;
        // SAFETY: each symbol is taken as the function type miclib.h declares for it, and the
        // library outlives the pointers (both live in `MicLib`).
        unsafe {
            let temperatures = LIBRARY_TEMPERATURES
                .into_iter()
                .map(|(sensor, read_call, valid_call)| {
                    let read = if sensor == "die" {
                        Temperature::Wide(lib.function(read_call)?)
                    } else {
                        Temperature::Narrow(lib.function(read_call)?)
                    };
                    Ok(TemperatureSensor {
                        sensor,
                        read_call,
                        read,
                        valid_call,
                        valid: lib.function(valid_call)?,
                    })
                })
                .collect::<Result<_, LoadError>>()?;
            let power = LIBRARY_POWER
                .into_iter()
                .map(|(reading, call)| Ok((reading, call, lib.function(call)?)))
                .collect::<Result<_, LoadError>>()?;
            let rails = LIBRARY_RAILS
                .into_iter()
                .map(|(rail, [power, current, voltage])| {
                    let reader = |call| Ok::<_, LoadError>((call, lib.function(call)?));
                    Ok((rail, [reader(power)?, reader(current)?, reader(voltage)?]))
                })
                .collect::<Result<_, LoadError>>()?;
            Ok(MicLib {
                get_devices: lib.function("mic_get_devices")?,
                free_devices: lib.function("mic_free_devices")?,
                get_ndevices: lib.function("mic_get_ndevices")?,
                get_device_at_index: lib.function("mic_get_device_at_index")?,
                open_device: lib.function("mic_open_device")?,
                close_device: lib.function("mic_close_device")?,
                get_thermal_info: lib.function("mic_get_thermal_info")?,
                free_thermal_info: lib.function("mic_free_thermal_info")?,
                temperatures,
                get_power_info: lib.function("mic_get_power_utilization_info")?,
                free_power_info: lib.function("mic_free_power_utilization_info")?,
                power,
                rails,
                get_cores_info: lib.function("mic_get_cores_info")?,
                free_cores_info: lib.function("mic_free_cores_info")?,
                cores_voltage: lib.function("mic_get_cores_voltage")?,
                cores_frequency: lib.function("mic_get_cores_frequency")?,
                get_memory_info: lib.function("mic_get_memory_info")?,
                free_memory_info: lib.function("mic_free_memory_info")?,
                memory_voltage: lib.function("mic_get_memory_voltage")?,
                _library: library,
            })
        }
    }

    /// Opens card `number`, which the library must list.
    fn open(&self, number: u32) -> Result<OpenDevice<'_>, LibraryError> {
        let card = format!("mic{number}");
        let failed = |call, code| LibraryError::Call {
            call,
            card: card.clone(),
            code,
        };
        // SAFETY: pointers to locals of the prototypes' types; the list is freed once.
        unsafe {
            let mut list = ptr::null_mut();
            let code = (self.get_devices)(&mut list);
            if code != 0 || list.is_null() {
                return Err(failed("mic_get_devices", code));
            }
            let listed = (|| {
                let mut count: c_int = 0;
                let code = (self.get_ndevices)(list, &mut count);
                if code != 0 {
                    return Err(failed("mic_get_ndevices", code));
                }
                for index in 0..count {
                    let mut device: c_int = -1;
                    let code = (self.get_device_at_index)(list, index, &mut device);
                    if code != 0 {
                        return Err(failed("mic_get_device_at_index", code));
                    }
                    if u32::try_from(device) == Ok(number) {
                        return Ok(true);
                    }
                }
                Ok(false)
            })();
            let freed = (self.free_devices)(list);
            if !listed? {
                return Err(LibraryError::NotListed(card));
            }
            if freed != 0 {
                return Err(failed("mic_free_devices", freed));
            }
            let mut handle = ptr::null_mut();
            let code = (self.open_device)(&mut handle, number);
            if code != 0 || handle.is_null() {
                return Err(failed("mic_open_device", code));
            }
            Ok(OpenDevice {
                handle,
                close: self.close_device,
                _library: std::marker::PhantomData,
            })
        }
    }
}

/// An open card handle, closed on drop (or by [`OpenDevice::close`], which tells how it went).
struct OpenDevice<'l> {
    handle: Handle,
    close: Free,
    _library: std::marker::PhantomData<&'l MicLib>,
}

impl OpenDevice<'_> {
    /// Closes the card; the library's return code.
    fn close(self) -> c_int {
        let device = std::mem::ManuallyDrop::new(self);
        // SAFETY: the handle came from mic_open_device; `device` is never dropped, so this is
        // its one close.
        unsafe { (device.close)(device.handle) }
    }
}

impl Drop for OpenDevice<'_> {
    fn drop(&mut self) {
        // SAFETY: the handle came from mic_open_device and is closed once.
        unsafe { (self.close)(self.handle) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_not_given_back_is_waited_for_a_bounded_time() {
        let source = LibrarySource::start(Duration::from_millis(50));
        let turn = source.calls.take().unwrap();
        let started = std::time::Instant::now();
        assert!(source.calls.take().is_none());
        assert!(started.elapsed() >= Duration::from_millis(50));
        drop(turn);
        assert!(source.calls.take().is_some());
        // A waiting caller is given the turn as soon as it is given back.
        let source = LibrarySource::start(Duration::from_secs(60));
        let turn = source.calls.take().unwrap();
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| source.calls.take().is_some());
            std::thread::sleep(Duration::from_millis(10));
            drop(turn);
            assert!(waiter.join().unwrap());
        });
    }
}
