//! luatune's chat-template engine: MiniJinja configured to render a Hugging Face chat template the
//! way transformers' `apply_chat_template` renders it with Jinja2, behind the C ABI declared in
//! ../luatune_jinja.h. What transformers sets up and what we mirror (docs/chat_formats.md):
//! - an environment with trim_blocks, lstrip_blocks and loop controls (break/continue);
//! - the globals `raise_exception(message)` and `strftime_now(format)`, and a `tojson` filter that is
//!   Python's `json.dumps(x, ensure_ascii=False, indent=, separators=, sort_keys=)`;
//! - the `{% generation %}...{% endgeneration %}` tag of its AssistantTracker extension, which we
//!   turn into two marker characters in the output (U+E000 before, U+E001 after) for the caller to
//!   cut out and record as the assistant's byte spans;
//! - Python's string and dict methods (minijinja-contrib's pycompat) and Python's way of printing
//!   values (`True`, `None`, `['a', 1]`), where MiniJinja would print `true`, `none`, `["a", 1]`.
//! Limits: every render has a fuel budget (an endless loop fails), MiniJinja's recursion limit, and
//! an output size limit; all of them end in an error, never a hang or a crash.

use std::ffi::c_char;
use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Rest, ValueKind};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, Output, State, UndefinedBehavior, Value};

const GEN_OPEN: char = '\u{E000}';
const GEN_CLOSE: char = '\u{E001}';
const RAISED: &str = "raise_exception: ";
const TEMPLATE_NAME: &str = "chat_template";

/// One compiled template and the environment that owns it (the C side's LtJinjaHandle).
pub struct LtJinjaHandle {
    env: Environment<'static>,
    has_generation: bool,
}

// ------------------------------------------------------------------------------------------------
// `{% generation %}` blocks

/// Replaces each `{% generation %}` / `{% endgeneration %}` tag (with any whitespace-control signs)
/// by an `if` block that prints a marker character. The `{%` and `%}` of the original tag stay where
/// they were, so trim_blocks, lstrip_blocks and `-` strip exactly the whitespace the tag would.
fn rewrite_generation(src: &str) -> (String, bool) {
    let mut out = String::with_capacity(src.len() + 64);
    let mut found = false;
    let mut rest = src;
    while let Some(p) = rest.find("{%") {
        out.push_str(&rest[..p]);
        let tag = &rest[p..];
        let Some(close) = tag.find("%}") else {
            out.push_str(tag);
            rest = "";
            break;
        };
        let inner = &tag[2..close];
        let (left, body) = match inner.chars().next() {
            Some(c @ ('-' | '+')) => (c.to_string(), &inner[1..]),
            _ => (String::new(), inner),
        };
        let (body, right) = match body.chars().last() {
            Some(c @ ('-' | '+')) => (&body[..body.len() - 1], c.to_string()),
            _ => (body, String::new()),
        };
        let marker = match body.trim() {
            "generation" => Some(GEN_OPEN),
            "endgeneration" => Some(GEN_CLOSE),
            _ => None,
        };
        match marker {
            Some(m) => {
                found = true;
                let _ = write!(out, "{{%{left} if true %}}{{{{ '{m}' }}}}{{% endif {right}%}}");
            }
            None => out.push_str(&tag[..close + 2]),
        }
        rest = &tag[close + 2..];
    }
    out.push_str(rest);
    (out, found)
}

// ------------------------------------------------------------------------------------------------
// Python's str(), repr() and json.dumps()

/// Python's repr() of a float (shortest round trip; exponent form below 1e-4 and from 1e16).
fn py_float(f: f64, out: &mut String) {
    if f.is_nan() {
        out.push_str("nan");
        return;
    }
    if f.is_infinite() {
        out.push_str(if f > 0.0 { "inf" } else { "-inf" });
        return;
    }
    if f == 0.0 {
        out.push_str(if f.is_sign_negative() { "-0.0" } else { "0.0" });
        return;
    }
    let sci = format!("{:e}", f); // shortest digits: "-1.2345e-5"
    let (mant, exp) = sci.split_once('e').unwrap();
    let exp: i32 = exp.parse().unwrap();
    let (neg, mant) = match mant.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mant),
    };
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    if neg {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp < 0 {
            out.push_str("0.");
            for _ in 0..(-exp - 1) {
                out.push('0');
            }
            out.push_str(&digits);
        } else {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                for _ in digits.len()..int_len {
                    out.push('0');
                }
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
}

fn py_number(v: &Value, out: &mut String) {
    if v.is_integer() {
        let _ = write!(out, "{v}");
    } else if let Ok(f) = f64::try_from(v.clone()) {
        py_float(f, out);
    } else {
        let _ = write!(out, "{v}");
    }
}

/// Python's repr() of a string.
fn py_repr_str(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Python's str() (as_repr = false) or repr() (true) of a value from the template's data.
fn py_str(v: &Value, as_repr: bool, out: &mut String) -> Result<(), Error> {
    match v.kind() {
        ValueKind::Undefined => {}
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number => py_number(v, out),
        ValueKind::String => {
            let s = v.as_str().unwrap_or_default();
            if as_repr {
                py_repr_str(s, out)
            } else {
                out.push_str(s)
            }
        }
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            for (i, item) in v.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_str(&item, true, out)?;
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, key) in v.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_str(&key, true, out)?;
                out.push_str(": ");
                py_str(&v.get_item(&key)?, true, out)?;
            }
            out.push('}');
        }
        _ => {
            let _ = write!(out, "{v}");
        }
    }
    Ok(())
}

struct JsonStyle {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

fn json_str(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{:04x}", unit);
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn json_newline(style: &JsonStyle, level: usize, out: &mut String) {
    if let Some(ind) = &style.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(ind);
        }
    }
}

/// Python's json.dumps of a value, with its options.
fn json_dumps(v: &Value, style: &JsonStyle, level: usize, out: &mut String) -> Result<(), Error> {
    match v.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if !v.is_integer() {
                if let Ok(f) = f64::try_from(v.clone()) {
                    if f.is_nan() {
                        out.push_str("NaN");
                        return Ok(());
                    } else if f.is_infinite() {
                        out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
                        return Ok(());
                    }
                }
            }
            py_number(v, out)
        }
        ValueKind::String => json_str(v.as_str().unwrap_or_default(), style.ensure_ascii, out),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_sep);
                }
                json_newline(style, level + 1, out);
                json_dumps(item, style, level + 1, out)?;
            }
            json_newline(style, level, out);
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if style.sort_keys {
                keys.sort();
            }
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_sep);
                }
                json_newline(style, level + 1, out);
                let mut k = String::new();
                match key.kind() {
                    ValueKind::String => k.push_str(key.as_str().unwrap_or_default()),
                    ValueKind::None => k.push_str("null"),
                    ValueKind::Bool => k.push_str(if key.is_true() { "true" } else { "false" }),
                    ValueKind::Number => py_number(key, &mut k),
                    _ => {
                        return Err(Error::new(
                            ErrorKind::InvalidOperation,
                            format!("tojson: keys must be str, int, float, bool or None, not {}", key.kind()),
                        ))
                    }
                }
                json_str(&k, style.ensure_ascii, out);
                out.push_str(&style.key_sep);
                json_dumps(&v.get_item(key)?, style, level + 1, out)?;
            }
            json_newline(style, level, out);
            out.push('}');
        }
        kind => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: a value of type {kind} is not JSON serializable"),
            ))
        }
    }
    Ok(())
}

/// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False), positionally or by keyword.
fn tojson(v: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let names = ["ensure_ascii", "indent", "separators", "sort_keys"];
    if args.len() > names.len() {
        return Err(Error::new(ErrorKind::TooManyArguments, "tojson takes at most 4 arguments"));
    }
    let mut opts: Vec<Value> = vec![Value::from(false), Value::from(()), Value::from(()), Value::from(false)];
    for (i, a) in args.iter().enumerate() {
        opts[i] = a.clone();
    }
    for (i, name) in names.iter().enumerate() {
        if let Some(val) = kwargs.get::<Option<Value>>(name)? {
            opts[i] = val;
        }
    }
    kwargs.assert_all_used()?;
    let indent = match opts[1].kind() {
        ValueKind::None | ValueKind::Undefined => None,
        ValueKind::String => Some(opts[1].as_str().unwrap_or_default().to_string()),
        ValueKind::Number => Some(" ".repeat(opts[1].as_i64().unwrap_or(0).max(0) as usize)),
        _ => return Err(Error::new(ErrorKind::InvalidOperation, "tojson: indent must be an int or a string")),
    };
    let (item_sep, key_sep) = match opts[2].kind() {
        ValueKind::None | ValueKind::Undefined => {
            (if indent.is_some() { "," } else { ", " }.to_string(), ": ".to_string())
        }
        _ => {
            let parts: Vec<Value> = opts[2].try_iter()?.collect();
            if parts.len() != 2 || parts.iter().any(|p| p.as_str().is_none()) {
                return Err(Error::new(ErrorKind::InvalidOperation, "tojson: separators must be two strings"));
            }
            (parts[0].as_str().unwrap().to_string(), parts[1].as_str().unwrap().to_string())
        }
    };
    let style = JsonStyle { ensure_ascii: opts[0].is_true(), indent, item_sep, key_sep, sort_keys: opts[3].is_true() };
    let mut out = String::new();
    json_dumps(v, &style, 0, &mut out)?;
    // A safe string: the formatter writes it as it is.
    Ok(Value::from_safe_string(out))
}

fn raise_exception(message: Option<Value>) -> Result<Value, Error> {
    let mut text = String::new();
    if let Some(m) = message {
        py_str(&m, false, &mut text)?;
    }
    Err(Error::new(ErrorKind::InvalidOperation, format!("{RAISED}{text}")))
}

// ------------------------------------------------------------------------------------------------
// strftime_now: Python's datetime.now().strftime(format), which is the C library's strftime on
// the local time. SOURCE_DATE_EPOCH (reproducible-builds.org), when set, pins the clock.

fn now_unix() -> i64 {
    if let Some(t) = std::env::var("SOURCE_DATE_EPOCH").ok().and_then(|v| v.parse::<i64>().ok()) {
        if t >= 0 {
            return t;
        }
    }
    unsafe { libc::time(std::ptr::null_mut()) as i64 }
}

fn strftime(format: &str, now: i64) -> Result<String, Error> {
    let fmt = std::ffi::CString::new(format)
        .map_err(|_| Error::new(ErrorKind::InvalidOperation, "strftime_now: the format holds a NUL byte"))?;
    unsafe {
        let t: libc::time_t = now as libc::time_t;
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return Err(Error::new(ErrorKind::InvalidOperation, "strftime_now: localtime failed"));
        }
        let mut buf = vec![0u8; 256 + format.len() * 8];
        let n = libc::strftime(buf.as_mut_ptr() as *mut c_char, buf.len(), fmt.as_ptr(), &tm);
        buf.truncate(n);
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }
}

// ------------------------------------------------------------------------------------------------
// JSON data in

fn from_json(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                Value::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(a) => Value::from(a.iter().map(from_json).collect::<Vec<Value>>()),
        serde_json::Value::Object(o) => {
            let mut map = indexmap::IndexMap::with_capacity(o.len());
            for (k, v) in o {
                map.insert(Value::from(k.as_str()), from_json(v));
            }
            Value::from(map)
        }
    }
}

// ------------------------------------------------------------------------------------------------
// The environment

fn build_env(source: String, fuel: u64) -> Result<LtJinjaHandle, Error> {
    let mut env = Environment::new();
    env.set_fuel(if fuel > 0 { Some(fuel) } else { None });
    env.set_syntax(SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build()?);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.set_formatter(|out: &mut Output, _state: &mut State, value: &Value| {
        if value.is_safe() || value.kind() == ValueKind::String {
            return out.write_str(value.as_str().unwrap_or_default()).map_err(Error::from);
        }
        let mut s = String::new();
        py_str(value, false, &mut s)?;
        out.write_str(&s).map_err(Error::from)
    });
    env.add_filter("tojson", tojson);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", |format: String| strftime(&format, now_unix()));
    let (rewritten, has_generation) = rewrite_generation(&source);
    env.add_template_owned(TEMPLATE_NAME, rewritten)?;
    Ok(LtJinjaHandle { env, has_generation })
}

// ------------------------------------------------------------------------------------------------
// Errors out

/// One line for the C++ side: what went wrong, without MiniJinja's location suffix (the caller
/// prefixes its own "FILE:LINE").
fn error_text(e: &Error) -> String {
    let detail = e.detail().unwrap_or_default().to_string();
    if let Some(msg) = detail.strip_prefix(RAISED) {
        return format!("the template raised an exception: {msg}");
    }
    let mut text = match e.kind() {
        ErrorKind::OutOfFuel => "the template ran past its work limit (an endless loop?)".to_string(),
        ErrorKind::WriteFailure => "the rendered text is past its size limit".to_string(),
        kind if detail.is_empty() => kind.to_string(),
        kind => format!("{kind}: {detail}"),
    };
    if e.kind() == ErrorKind::WriteFailure {
        return text;
    }
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        let _ = write!(text, ": {s}");
        src = s.source();
    }
    text.replace('\n', " ")
}

fn set_error(e: &Error, err: *mut *mut c_char, err_line: *mut u32) {
    unsafe {
        if !err_line.is_null() {
            *err_line = e.line().unwrap_or(0) as u32;
        }
        if !err.is_null() {
            *err = to_c_string(&error_text(e));
        }
    }
}

fn set_error_text(text: &str, err: *mut *mut c_char, err_line: *mut u32) {
    unsafe {
        if !err_line.is_null() {
            *err_line = 0;
        }
        if !err.is_null() {
            *err = to_c_string(text);
        }
    }
}

fn to_c_string(s: &str) -> *mut c_char {
    let bytes: Vec<u8> = s.bytes().map(|b| if b == 0 { b'?' } else { b }).collect();
    std::ffi::CString::new(bytes).unwrap().into_raw()
}

// A Write that fails once the text passes its limit.
struct Limited {
    buf: Vec<u8>,
    limit: usize,
}
impl std::io::Write for Limited {
    fn write(&mut self, s: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + s.len() > self.limit {
            return Err(std::io::Error::new(std::io::ErrorKind::Other, "output limit"));
        }
        self.buf.extend_from_slice(s);
        Ok(s.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// ------------------------------------------------------------------------------------------------
// The C ABI (../luatune_jinja.h)

/// # Safety
/// `source` points to `len` bytes of UTF-8; `err`/`err_line` are null or writable.
#[no_mangle]
pub unsafe extern "C" fn lt_jinja_compile(
    source: *const c_char,
    len: usize,
    fuel: u64,
    err: *mut *mut c_char,
    err_line: *mut u32,
) -> *mut LtJinjaHandle {
    let r = catch_unwind(AssertUnwindSafe(|| {
        let bytes = std::slice::from_raw_parts(source as *const u8, len);
        let text = match std::str::from_utf8(bytes) {
            Ok(t) => t.to_string(),
            Err(e) => {
                set_error_text(&format!("the template is not valid UTF-8 (byte {})", e.valid_up_to()), err, err_line);
                return std::ptr::null_mut();
            }
        };
        match build_env(text, fuel) {
            Ok(handle) => Box::into_raw(Box::new(handle)),
            Err(e) => {
                set_error(&e, err, err_line);
                std::ptr::null_mut()
            }
        }
    }));
    r.unwrap_or_else(|_| {
        set_error_text("internal error: the template engine panicked while compiling", err, err_line);
        std::ptr::null_mut()
    })
}

/// # Safety
/// `h` is null or from lt_jinja_compile.
#[no_mangle]
pub unsafe extern "C" fn lt_jinja_free(h: *mut LtJinjaHandle) {
    if !h.is_null() {
        drop(Box::from_raw(h));
    }
}

/// # Safety
/// `h` is from lt_jinja_compile.
#[no_mangle]
pub unsafe extern "C" fn lt_jinja_has_generation(h: *const LtJinjaHandle) -> i32 {
    (*h).has_generation as i32
}

/// # Safety
/// `h` from lt_jinja_compile; `context` points to `len` bytes of a JSON object; out pointers writable.
#[no_mangle]
pub unsafe extern "C" fn lt_jinja_render(
    h: *const LtJinjaHandle,
    context: *const c_char,
    len: usize,
    max_output: usize,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut c_char,
    err_line: *mut u32,
) -> i32 {
    let r = catch_unwind(AssertUnwindSafe(|| -> i32 {
        let h = &*h;
        let bytes = std::slice::from_raw_parts(context as *const u8, len);
        let ctx: serde_json::Value = match serde_json::from_slice(bytes) {
            Ok(v) => v,
            Err(e) => {
                set_error_text(&format!("internal error: the render context is not JSON: {e}"), err, err_line);
                return 1;
            }
        };
        let tmpl = match h.env.get_template(TEMPLATE_NAME) {
            Ok(t) => t,
            Err(e) => {
                set_error(&e, err, err_line);
                return 1;
            }
        };
        let mut sink = Limited { buf: Vec::new(), limit: max_output };
        let rendered = tmpl.render_captured_to(from_json(&ctx), &mut sink).map(|_| ());
        match rendered {
            Ok(()) => {
                let s = std::mem::take(&mut sink.buf);
                *out_len = s.len();
                let boxed: Box<[u8]> = s.into_boxed_slice();
                *out = Box::into_raw(boxed) as *mut c_char;
                0
            }
            Err(e) => {
                set_error(&e, err, err_line);
                1
            }
        }
    }));
    r.unwrap_or_else(|_| {
        set_error_text("internal error: the template engine panicked while rendering", err, err_line);
        1
    })
}

/// # Safety
/// `p`/`len` from lt_jinja_render's out/out_len.
#[no_mangle]
pub unsafe extern "C" fn lt_jinja_free_output(p: *mut c_char, len: usize) {
    if !p.is_null() {
        drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(p as *mut u8, len)));
    }
}

/// # Safety
/// `p` from an err out-parameter.
#[no_mangle]
pub unsafe extern "C" fn lt_jinja_free_error(p: *mut c_char) {
    if !p.is_null() {
        drop(std::ffi::CString::from_raw(p));
    }
}
