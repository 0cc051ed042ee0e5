//! The libmicmgmt calls of one card's read: an info structure opened, its values read, and the
//! structure freed, each call's failure kept to report; the readings gathered for the card.

use std::ffi::c_int;
use std::ptr;

use super::super::{
    degrees, micro, printed_unsigned, ReadingKind, CORE_FREQUENCY, CORE_VOLTAGE, MEMORY_VOLTAGE,
    POWER, RAIL_CURRENT, RAIL_POWER, RAIL_VOLTAGE, TEMPERATURE, TEMPERATURE_STATUS, UNAVAILABLE,
};
use super::{Free, GetInfo, Handle, LibraryError, MicLib, Temperature};
use crate::metrics::{Desc, Value};

/// A reading: its metric, its `sensor`/`reading`/`rail` label if any, its value.
pub(super) type Reading = (&'static Desc, ReadingKind, Value);

/// libmicmgmt calls for one card: each returns 0 on success; failures are kept to report.
pub(super) struct Calls<'c> {
    pub card: &'c str,
    pub failures: Vec<LibraryError>,
    pub readings: Vec<Reading>,
}

/// One reader per info structure.
impl Calls<'_> {
    /// Each temperature sensor's status, and its reading where the sensor is valid.
    ///
    /// # Safety
    /// `device` is an open device handle, and every function pointer in `library` has the
    /// prototype miclib.h declares for its name.
    pub(super) unsafe fn thermal(&mut self, library: &MicLib, device: Handle) {
        let get_thermal = ("mic_get_thermal_info", library.get_thermal_info);
        let Some(thermal) = self.info(get_thermal, device) else {
            return;
        };
        for sensor in &library.temperatures {
            let Some(valid) = self.read((sensor.valid_call, sensor.valid), thermal) else {
                continue;
            };
            let kind = Some(("sensor", sensor.sensor));
            let status = if valid != 0 { 0 } else { UNAVAILABLE };
            self.readings
                .push((&TEMPERATURE_STATUS, kind, Value::Int(status)));
            if valid == 0 {
                continue;
            }
            let celsius = match sensor.read {
                Temperature::Wide(read) => self.read((sensor.read_call, read), thermal),
                Temperature::Narrow(read) => {
                    self.read((sensor.read_call, read), thermal).map(u32::from)
                }
            };
            if let Some(celsius) = celsius {
                self.readings
                    .push((&TEMPERATURE, kind, degrees(printed_unsigned(celsius))));
            }
        }
        self.free(
            ("mic_free_thermal_info", library.free_thermal_info),
            thermal,
        );
    }

    /// The card's power readings and each rail's power, current and voltage.
    ///
    /// # Safety
    /// `device` is an open device handle, and every function pointer in `library` has the
    /// prototype miclib.h declares for its name.
    pub(super) unsafe fn power(&mut self, library: &MicLib, device: Handle) {
        let get_power = ("mic_get_power_utilization_info", library.get_power_info);
        let Some(power) = self.info(get_power, device) else {
            return;
        };
        for (reading, call, read) in &library.power {
            if let Some(microwatts) = self.read((call, *read), power) {
                let kind = Some(("reading", *reading));
                self.readings
                    .push((&POWER, kind, micro(u64::from(microwatts))));
            }
        }
        let rail_metrics = [&RAIL_POWER, &RAIL_CURRENT, &RAIL_VOLTAGE];
        for (rail, readers) in &library.rails {
            for (reader, desc) in readers.iter().zip(rail_metrics) {
                if let Some(micros) = self.read(*reader, power) {
                    self.readings
                        .push((desc, Some(("rail", *rail)), micro(u64::from(micros))));
                }
            }
        }
        self.free(
            ("mic_free_power_utilization_info", library.free_power_info),
            power,
        );
    }

    /// The cores' voltage and frequency.
    ///
    /// # Safety
    /// `device` is an open device handle, and every function pointer in `library` has the
    /// prototype miclib.h declares for its name.
    pub(super) unsafe fn cores(&mut self, library: &MicLib, device: Handle) {
        let get_cores = ("mic_get_cores_info", library.get_cores_info);
        let Some(cores) = self.info(get_cores, device) else {
            return;
        };
        let voltage = ("mic_get_cores_voltage", library.cores_voltage);
        if let Some(microvolts) = self.read(voltage, cores) {
            self.readings
                .push((&CORE_VOLTAGE, None, micro(u64::from(microvolts))));
        }
        let frequency = ("mic_get_cores_frequency", library.cores_frequency);
        if let Some(kilohertz) = self.read(frequency, cores) {
            let hertz = Value::Float(f64::from(kilohertz) * 1e3);
            self.readings.push((&CORE_FREQUENCY, None, hertz));
        }
        self.free(("mic_free_cores_info", library.free_cores_info), cores);
    }

    /// The memory's voltage.
    ///
    /// # Safety
    /// `device` is an open device handle, and every function pointer in `library` has the
    /// prototype miclib.h declares for its name.
    pub(super) unsafe fn memory(&mut self, library: &MicLib, device: Handle) {
        let get_memory = ("mic_get_memory_info", library.get_memory_info);
        let Some(memory) = self.info(get_memory, device) else {
            return;
        };
        let voltage = ("mic_get_memory_voltage", library.memory_voltage);
        if let Some(microvolts) = self.read(voltage, memory) {
            self.readings
                .push((&MEMORY_VOLTAGE, None, micro(u64::from(microvolts))));
        }
        self.free(("mic_free_memory_info", library.free_memory_info), memory);
    }

    fn failed(&mut self, call: &'static str, code: c_int) {
        self.failures.push(LibraryError::Call {
            call,
            card: self.card.to_string(),
            code,
        });
    }

    /// An info structure of an open device (thermal, power, cores, memory), to be freed.
    ///
    /// # Safety
    /// `device` is an open device handle; `get` has the `mic_get_*_info` prototype.
    unsafe fn info(
        &mut self,
        (call, get): (&'static str, GetInfo),
        device: Handle,
    ) -> Option<Handle> {
        let mut info = ptr::null_mut();
        match get(device, &mut info) {
            0 if !info.is_null() => Some(info),
            code => {
                self.failed(call, code);
                None
            }
        }
    }

    /// Frees an info structure; a library that refuses is reported.
    ///
    /// # Safety
    /// `info` is a live info structure of the kind `free` takes, not used again.
    unsafe fn free(&mut self, (call, free): (&'static str, Free), info: Handle) {
        match free(info) {
            0 => {}
            code => self.failed(call, code),
        }
    }

    /// One value read from an info structure.
    ///
    /// # Safety
    /// `info` is a live info structure of the kind `read` takes.
    unsafe fn read<T: Default>(
        &mut self,
        (call, read): (&'static str, unsafe extern "C" fn(Handle, *mut T) -> c_int),
        info: Handle,
    ) -> Option<T> {
        let mut value = T::default();
        match read(info, &mut value) {
            0 => Some(value),
            code => {
                self.failed(call, code);
                None
            }
        }
    }
}
