//! Commands of our own on DPDK's telemetry socket, beside DPDK's
//! (`dpdk-telemetry.py`, then `/spillway/stats`).
//!
//! DPDK calls a command's function on its telemetry thread with the
//! command's parameters; it fills a `rte_tel_data` that DPDK turns into
//! JSON. Here a command is a Rust closure returning a [`TelValue`], which
//! is written into DPDK's structure within its limits: two levels (a
//! dictionary or array of containers of scalars), 256 entries a
//! dictionary, 512 an array, 128 bytes a string, names of letters, digits,
//! `_` and `/`. Deeper values are flattened into their container under
//! path-like names (`a/b/0`; an element of an array that has a string
//! `name` goes under that name instead of its index), other characters
//! of a name become `_`; what does not fit is left out, and a key
//! `truncated` says so.

use std::ffi::{CStr, CString, c_char, c_int};
use std::sync::{Arc, Mutex};

use dpdk_sys::rte_tel_value_type as ty;

use crate::{Eal, Errno};

/// A value for the telemetry client.
#[derive(Debug, Clone, PartialEq)]
pub enum TelValue {
    /// An unsigned integer.
    U64(u64),
    /// A signed integer (DPDK's are 32-bit: larger ones are sent as
    /// strings).
    Int(i64),
    /// A string (cut to 127 bytes).
    Str(String),
    /// Named values, in order.
    Dict(Vec<(String, TelValue)>),
    /// Values, in order.
    Array(Vec<TelValue>),
}

/// Why a telemetry command could not be registered.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// a command name DPDK refuses (it must start with `/`, at most 63
    /// bytes of letters, digits, `_` and `/`)
    #[error(
        "telemetry command {0:?}: must start with '/' and hold at most 63 letters, digits, '_' or '/'"
    )]
    BadName(String),
    /// rte_telemetry_register_cmd failed
    #[error("telemetry command {cmd}: {errno}")]
    Register {
        /// The command.
        cmd: String,
        /// Why.
        errno: Errno,
    },
}

type Handler = Arc<dyn Fn(&str) -> TelValue + Send + Sync>;

/// The registered commands: DPDK passes the command's name to the one
/// callback, which finds its closure here.
static HANDLERS: Mutex<Vec<(String, Handler)>> = Mutex::new(Vec::new());

/// Registers `cmd` (e.g. `/spillway/stats`) on DPDK's telemetry socket:
/// a client's request runs `handler` with the request's parameters on
/// DPDK's telemetry thread. Registering a name again replaces its handler.
pub fn register_telemetry(
    _eal: &Eal,
    cmd: &str,
    help: &str,
    handler: impl Fn(&str) -> TelValue + Send + Sync + 'static,
) -> Result<(), TelemetryError> {
    let valid = cmd.starts_with('/')
        && cmd.len() < 64
        && cmd
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'/');
    if !valid {
        return Err(TelemetryError::BadName(cmd.to_owned()));
    }
    let c_cmd = CString::new(cmd).map_err(|_| TelemetryError::BadName(cmd.to_owned()))?;
    let c_help = CString::new(help.replace('\0', " ")).unwrap_or_default();
    {
        let mut handlers = HANDLERS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        handlers.retain(|(c, _)| c != cmd);
        handlers.push((cmd.to_owned(), Arc::new(handler)));
    }
    // SAFETY: EAL is initialised (the &Eal proves it); DPDK copies the
    // command's name and help text (strlcpy into its own table), so the
    // CStrings may go when this returns; the callback is a plain function
    // valid for the process's life.
    let ret = unsafe {
        dpdk_sys::rte_telemetry_register_cmd(c_cmd.as_ptr(), Some(callback), c_help.as_ptr())
    };
    if ret < 0 {
        return Err(TelemetryError::Register {
            cmd: cmd.to_owned(),
            errno: Errno::from_ret(ret),
        });
    }
    Ok(())
}

/// DPDK's callback for every command registered here.
///
/// # Safety
/// DPDK passes valid NUL-terminated `cmd` and `params` (params may be
/// null) and a `rte_tel_data` to fill, owned by its caller.
unsafe extern "C" fn callback(
    cmd: *const c_char,
    params: *const c_char,
    d: *mut dpdk_sys::rte_tel_data,
) -> c_int {
    if cmd.is_null() || d.is_null() {
        return -1;
    }
    // SAFETY: non-null, NUL-terminated, valid for this call (see above).
    let cmd = unsafe { CStr::from_ptr(cmd) }.to_string_lossy();
    let params = if params.is_null() {
        String::new()
    } else {
        // SAFETY: as for cmd.
        unsafe { CStr::from_ptr(params) }
            .to_string_lossy()
            .into_owned()
    };
    let handler = HANDLERS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .find(|(c, _)| *c == cmd)
        .map(|(_, h)| h.clone());
    let Some(handler) = handler else {
        return -1;
    };
    // A panic must not unwind into C.
    let Ok(value) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&params)))
    else {
        return -1;
    };
    let mut out = Tel(d);
    out.top(&value);
    0
}

/// The `rte_tel_data` a callback fills.
struct Tel(*mut dpdk_sys::rte_tel_data);

const MAX_STRING: usize = dpdk_sys::RTE_TEL_MAX_STRING_LEN as usize - 1;
const MAX_DICT: usize = dpdk_sys::RTE_TEL_MAX_DICT_ENTRIES as usize;
const MAX_ARRAY: usize = dpdk_sys::RTE_TEL_MAX_ARRAY_ENTRIES as usize;

/// `s` cut to DPDK's string length (on a character boundary), as C.
fn c_string(s: &str) -> CString {
    let mut end = s.len().min(MAX_STRING);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    CString::new(s[..end].replace('\0', " ")).unwrap_or_default()
}

/// A scalar as a string (for a place that takes only strings).
fn scalar_text(v: &TelValue) -> Option<String> {
    match v {
        TelValue::U64(n) => Some(n.to_string()),
        TelValue::Int(n) => Some(n.to_string()),
        TelValue::Str(s) => Some(s.clone()),
        TelValue::Dict(_) | TelValue::Array(_) => None,
    }
}

impl Tel {
    /// The top level: a dictionary, an array or a string.
    fn top(&mut self, v: &TelValue) {
        match v {
            TelValue::Dict(entries) => {
                // SAFETY: self.0 is the caller's valid rte_tel_data.
                unsafe { dpdk_sys::rte_tel_data_start_dict(self.0) };
                for (n, (k, v)) in entries.iter().enumerate() {
                    if n + 1 >= MAX_DICT {
                        self.dict_str("truncated", "more entries than telemetry carries");
                        break;
                    }
                    match v {
                        TelValue::Dict(_) | TelValue::Array(_) => {
                            if let Some(child) = Child::of(v) {
                                let name = c_string(&name(k));
                                // SAFETY: both valid; keep=0 hands the
                                // child to DPDK, which frees it.
                                unsafe {
                                    dpdk_sys::rte_tel_data_add_dict_container(
                                        self.0,
                                        name.as_ptr(),
                                        child.into_raw(),
                                        0,
                                    )
                                };
                            }
                        }
                        scalar => self.dict_scalar(&name(k), scalar),
                    }
                }
            }
            TelValue::Array(items) => {
                let all_u64 = items.iter().all(|i| matches!(i, TelValue::U64(_)));
                let all_scalar = items
                    .iter()
                    .all(|i| !matches!(i, TelValue::Dict(_) | TelValue::Array(_)));
                let kind = if all_u64 {
                    ty::RTE_TEL_U64_VAL
                } else if all_scalar {
                    ty::RTE_TEL_STRING_VAL
                } else {
                    ty::RTE_TEL_CONTAINER
                };
                // SAFETY: self.0 is the caller's valid rte_tel_data.
                unsafe { dpdk_sys::rte_tel_data_start_array(self.0, kind) };
                for item in items.iter().take(MAX_ARRAY) {
                    match item {
                        TelValue::U64(n) if all_u64 => {
                            // SAFETY: an array of u64 started above.
                            unsafe { dpdk_sys::rte_tel_data_add_array_u64(self.0, *n) };
                        }
                        _ if all_scalar => {
                            let s = c_string(&scalar_text(item).unwrap_or_default());
                            // SAFETY: an array of strings started above.
                            unsafe { dpdk_sys::rte_tel_data_add_array_string(self.0, s.as_ptr()) };
                        }
                        _ => {
                            if let Some(child) = Child::of(item) {
                                // SAFETY: an array of containers; keep=0.
                                unsafe {
                                    dpdk_sys::rte_tel_data_add_array_container(
                                        self.0,
                                        child.into_raw(),
                                        0,
                                    )
                                };
                            }
                        }
                    }
                }
            }
            scalar => {
                let s = c_string(&scalar_text(scalar).unwrap_or_default());
                // SAFETY: self.0 is valid; DPDK copies the string.
                unsafe { dpdk_sys::rte_tel_data_string(self.0, s.as_ptr()) };
            }
        }
    }

    fn dict_str(&mut self, k: &str, v: &str) {
        let (k, v) = (c_string(k), c_string(v));
        // SAFETY: a dictionary was started on the valid self.0; DPDK
        // copies both strings.
        unsafe { dpdk_sys::rte_tel_data_add_dict_string(self.0, k.as_ptr(), v.as_ptr()) };
    }

    /// A scalar entry of a dictionary.
    fn dict_scalar(&mut self, k: &str, v: &TelValue) {
        match v {
            TelValue::U64(n) => {
                let k = c_string(k);
                // SAFETY: a dictionary was started on the valid self.0.
                unsafe { dpdk_sys::rte_tel_data_add_dict_u64(self.0, k.as_ptr(), *n) };
            }
            TelValue::Int(n) if c_int::try_from(*n).is_ok() => {
                let (k, n) = (c_string(k), c_int::try_from(*n).unwrap_or_default());
                // SAFETY: as above.
                unsafe { dpdk_sys::rte_tel_data_add_dict_int(self.0, k.as_ptr(), n) };
            }
            other => self.dict_str(k, &scalar_text(other).unwrap_or_default()),
        }
    }
}

/// A container's `rte_tel_data`, freed unless handed to DPDK.
struct Child(Tel);

impl Child {
    /// `v` (a dictionary or an array) as one level of scalars: deeper
    /// values flattened under dotted names.
    fn of(v: &TelValue) -> Option<Child> {
        // SAFETY: allocates an empty rte_tel_data (or returns null).
        let d = unsafe { dpdk_sys::rte_tel_data_alloc() };
        if d.is_null() {
            return None;
        }
        let mut child = Child(Tel(d));
        // SAFETY: d is valid and fresh.
        unsafe { dpdk_sys::rte_tel_data_start_dict(d) };
        let mut flat = Vec::new();
        flatten("", v, &mut flat);
        let total = flat.len();
        for (k, v) in flat.iter().take(MAX_DICT - 1) {
            child.0.dict_scalar(k, v);
        }
        if total >= MAX_DICT {
            child
                .0
                .dict_str("truncated", "more entries than telemetry carries");
        }
        Some(child)
    }

    fn into_raw(self) -> *mut dpdk_sys::rte_tel_data {
        let d = (self.0).0;
        std::mem::forget(self);
        d
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // SAFETY: allocated by rte_tel_data_alloc and not handed to DPDK.
        unsafe { dpdk_sys::rte_tel_data_free((self.0).0) };
    }
}

/// `k` as a name DPDK takes: letters, digits, `_` and `/`.
fn name(k: &str) -> String {
    k.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '/' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `v`'s scalars under path-like names below `prefix`.
fn flatten(prefix: &str, v: &TelValue, out: &mut Vec<(String, TelValue)>) {
    let join = |k: &str| {
        if prefix.is_empty() {
            name(k)
        } else {
            format!("{prefix}/{}", name(k))
        }
    };
    match v {
        TelValue::Dict(entries) => {
            for (k, v) in entries {
                flatten(&join(k), v, out);
            }
        }
        TelValue::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let key = match v {
                    TelValue::Dict(e) => e.iter().find_map(|(k, v)| match (k.as_str(), v) {
                        ("name", TelValue::Str(n)) => Some(n.clone()),
                        _ => None,
                    }),
                    _ => None,
                };
                flatten(&join(&key.unwrap_or_else(|| i.to_string())), v, out);
            }
        }
        scalar => out.push((prefix.to_owned(), scalar.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_values_flatten_under_path_like_names() {
        let v = TelValue::Dict(vec![
            ("a".into(), TelValue::U64(1)),
            (
                "b".into(),
                TelValue::Array(vec![
                    TelValue::Str("x".into()),
                    TelValue::Dict(vec![("c".into(), TelValue::Int(-2))]),
                    TelValue::Dict(vec![
                        ("name".into(), TelValue::Str("web-1".into())),
                        ("10.0.0.1:80".into(), TelValue::U64(3)),
                    ]),
                ]),
            ),
        ]);
        let mut out = Vec::new();
        flatten("", &v, &mut out);
        assert_eq!(
            out,
            vec![
                ("a".into(), TelValue::U64(1)),
                ("b/0".into(), TelValue::Str("x".into())),
                ("b/1/c".into(), TelValue::Int(-2)),
                ("b/web_1/name".into(), TelValue::Str("web-1".into())),
                ("b/web_1/10_0_0_1_80".into(), TelValue::U64(3)),
            ]
        );
    }

    #[test]
    fn strings_are_cut_to_dpdks_length_on_a_character_boundary() {
        let long = "é".repeat(100);
        let c = c_string(&long);
        assert!(c.as_bytes().len() <= MAX_STRING);
        assert!(std::str::from_utf8(c.as_bytes()).is_ok());
    }
}
