//! A pull parser over JSON text. Decoders ask it for the value they expect next, so no
//! intermediate tree is built; its errors collect the path of the failing field as they
//! propagate outwards.

use std::borrow::Cow;
use std::fmt::Write;

use crate::allowance::Budget;
use crate::error::FormatError;

/// Deepest nesting of arrays and objects that the parser skips inside an unknown field.
const MAX_SKIP_DEPTH: usize = 128;

/// Longest piece of input quoted back in an error message, in characters.
const MAX_QUOTED: usize = 40;

enum Segment {
    Field(&'static str),
    Index(usize),
}

/// A decoding failure: what was wrong, and where (the path is stored innermost first).
pub(crate) struct Error {
    message: String,
    path: Vec<Segment>,
}

impl Error {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            path: Vec::new(),
        }
    }

    /// Renders `a[0].b.c[2]: message` as the crate's error.
    pub(crate) fn into_format_error(self) -> FormatError {
        let mut path = String::new();
        for segment in self.path.iter().rev() {
            match segment {
                Segment::Field(name) => {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(name);
                }
                Segment::Index(i) => {
                    let _ = write!(path, "[{i}]");
                }
            }
        }
        if path.is_empty() {
            FormatError::Json(self.message)
        } else {
            FormatError::Json(format!("{path}: {}", self.message))
        }
    }
}

/// Adds the enclosing field's name to the path of an error on its way out.
pub(crate) trait InField {
    fn in_field(self, name: &'static str) -> Self;
}

impl<T> InField for Result<T, Error> {
    fn in_field(self, name: &'static str) -> Self {
        self.map_err(|mut e| {
            e.path.push(Segment::Field(name));
            e
        })
    }
}

/// The kind of JSON value that starts at the read position.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Object,
    Array,
    String,
    Number,
    Bool,
    Null,
}

impl Kind {
    fn describe(self) -> &'static str {
        match self {
            Kind::Object => "an object",
            Kind::Array => "an array",
            Kind::String => "a string",
            Kind::Number => "a number",
            Kind::Bool => "a boolean",
            Kind::Null => "null",
        }
    }
}

/// An integer type that OTLP JSON carries as a number or a decimal string.
pub(crate) trait Integer: TryFrom<i128> {
    /// The proto name of the type, for error messages.
    const PROTO: &'static str;
}

impl Integer for i32 {
    const PROTO: &'static str = "int32";
}
impl Integer for u32 {
    const PROTO: &'static str = "uint32";
}
impl Integer for i64 {
    const PROTO: &'static str = "int64";
}
impl Integer for u64 {
    const PROTO: &'static str = "uint64";
}

/// Reads JSON values from `bytes` one at a time; what its decoder allocates (list elements,
/// strings) is taken from the document's [`Budget`] first.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    budget: Budget<'a>,
}

impl<'a> Reader<'a> {
    /// A reader whose allocations are also drawn from `pool` when there is one.
    pub(crate) fn new(bytes: &'a [u8], pool: Option<&'a dyn crate::allowance::Pool>) -> Self {
        Self {
            bytes,
            pos: 0,
            budget: Budget::drawing(bytes.len(), pool),
        }
    }

    /// The crate's error for `e`, which the decoder of `what` returned: the budget's when it
    /// ran out, since the decoder then stopped short.
    pub(crate) fn error(&self, e: Error, what: &'static str) -> FormatError {
        if self.budget.exceeded() {
            self.budget.error(what)
        } else {
            e.into_format_error()
        }
    }

    fn take_n<T>(&self, n: usize) -> Result<(), Error> {
        if self.budget.take_n::<T>(n) {
            Ok(())
        } else {
            Err(Error::new(
                "decoding takes more memory than the document's size allows",
            ))
        }
    }

    /// Fails unless only whitespace is left.
    pub(crate) fn finish(&mut self) -> Result<(), Error> {
        self.skip_ws();
        if self.pos < self.bytes.len() {
            return Err(self.syntax("unexpected data after the top-level value"));
        }
        Ok(())
    }

    /// Reads an object, calling `field` with the read position at each non-null value.
    /// `null` values are skipped: in proto3 JSON they mean "default".
    pub(crate) fn object(
        &mut self,
        mut field: impl FnMut(&mut Self, &str) -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.expect(Kind::Object)?;
        self.pos += 1;
        if self.eat(b'}') {
            return Ok(());
        }
        loop {
            self.skip_ws();
            if self.bytes.get(self.pos) != Some(&b'"') {
                return Err(self.syntax("expected a field name"));
            }
            let key = self.string_token()?;
            if !self.eat(b':') {
                return Err(self.syntax("expected ':'"));
            }
            if self.peek()? == Kind::Null {
                self.literal(b"null")?;
            } else {
                field(self, &key)?;
            }
            if self.eat(b',') {
                continue;
            }
            if self.eat(b'}') {
                return Ok(());
            }
            return Err(self.syntax("expected ',' or '}'"));
        }
    }

    /// Reads an array, reading each element with `item`.
    pub(crate) fn list<T>(
        &mut self,
        mut item: impl FnMut(&mut Self) -> Result<T, Error>,
    ) -> Result<Vec<T>, Error> {
        self.expect(Kind::Array)?;
        self.pos += 1;
        let mut items = Vec::new();
        if self.eat(b']') {
            return Ok(items);
        }
        loop {
            if items.len() == items.capacity() {
                // What growing it allocates, as `Vec` would (doubling).
                let grow = items.capacity().max(4);
                self.take_n::<T>(grow)?;
                items.reserve(grow);
            }
            let index = items.len();
            let value = item(self).map_err(|mut e| {
                e.path.push(Segment::Index(index));
                e
            })?;
            items.push(value);
            if self.eat(b',') {
                continue;
            }
            if self.eat(b']') {
                return Ok(items);
            }
            return Err(self.syntax("expected ',' or ']'"));
        }
    }

    /// Skips one value of any kind (an unknown field's).
    pub(crate) fn skip(&mut self) -> Result<(), Error> {
        // Positions inside a value nobody asked for would only be noise in the path.
        self.skip_nested(0).map_err(|mut e| {
            e.path.clear();
            e
        })
    }

    fn skip_nested(&mut self, depth: usize) -> Result<(), Error> {
        match self.peek()? {
            Kind::Object | Kind::Array if depth >= MAX_SKIP_DEPTH => {
                Err(self.syntax(&format!("nested deeper than {MAX_SKIP_DEPTH} levels")))
            }
            Kind::Object => self.object(|r, _| r.skip_nested(depth + 1)),
            Kind::Array => self.list(|r| r.skip_nested(depth + 1)).map(drop),
            Kind::String => self.string_token().map(drop),
            Kind::Number => self.number_token().map(drop),
            Kind::Bool => self.boolean().map(drop),
            Kind::Null => self.literal(b"null"),
        }
    }

    /// Reads a string (taking its length from the budget: decoders keep most of them).
    pub(crate) fn string(&mut self) -> Result<Cow<'a, str>, Error> {
        self.expect(Kind::String)?;
        let s = self.string_token()?;
        self.take_n::<u8>(s.len())?;
        Ok(s)
    }

    /// Reads `true` or `false`.
    pub(super) fn boolean(&mut self) -> Result<bool, Error> {
        self.expect(Kind::Bool)?;
        if self.try_literal(b"true") {
            Ok(true)
        } else if self.try_literal(b"false") {
            Ok(false)
        } else {
            Err(self.syntax("unknown literal"))
        }
    }

    /// Reads an integer given as a number or as a decimal string: `5`, `"5"`, `5.0` and `5e0`
    /// are all 5; fractions and values outside `T`'s range are errors.
    pub(crate) fn integer<T: Integer>(&mut self) -> Result<T, Error> {
        let value = match self.peek()? {
            Kind::Number => parse_integer(self.number_token()?),
            Kind::String => {
                let text = self.string_token()?;
                if !is_number(&text) {
                    return Err(Error::new(format!("not an integer: {}", quote(&text))));
                }
                parse_integer(&text)
            }
            other => Err(Error::new(format!(
                "expected an integer, found {}",
                other.describe()
            ))),
        }?;
        T::try_from(value)
            .map_err(|_| Error::new(format!("{value} is out of range for {}", T::PROTO)))
    }

    /// Reads a double given as a number, a numeric string, or "NaN"/"Infinity"/"-Infinity".
    pub(super) fn double(&mut self) -> Result<f64, Error> {
        match self.peek()? {
            Kind::Number => parse_double(self.number_token()?),
            Kind::String => match &*self.string_token()? {
                "NaN" => Ok(f64::NAN),
                "Infinity" => Ok(f64::INFINITY),
                "-Infinity" => Ok(f64::NEG_INFINITY),
                text if is_number(text) => parse_double(text),
                text => Err(Error::new(format!("not a number: {}", quote(text)))),
            },
            other => Err(Error::new(format!(
                "expected a number, found {}",
                other.describe()
            ))),
        }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    /// Consumes `c` (after whitespace) if it comes next.
    fn eat(&mut self, c: u8) -> bool {
        self.skip_ws();
        let found = self.bytes.get(self.pos) == Some(&c);
        if found {
            self.pos += 1;
        }
        found
    }

    fn syntax(&self, what: &str) -> Error {
        syntax_at(self.pos, what)
    }

    /// Whether one of `words` starts at the read position.
    fn at_literal(&self, words: &[&[u8]]) -> bool {
        let rest = &self.bytes[self.pos..];
        words.iter().any(|w| rest.starts_with(w))
    }

    pub(crate) fn peek(&mut self) -> Result<Kind, Error> {
        self.skip_ws();
        match self.bytes.get(self.pos) {
            None => Err(self.syntax("unexpected end of input")),
            Some(b'{') => Ok(Kind::Object),
            Some(b'[') => Ok(Kind::Array),
            Some(b'"') => Ok(Kind::String),
            Some(b'-' | b'0'..=b'9') => Ok(Kind::Number),
            // A literal only when it is one: `nope` is not null ("found null" misled).
            Some(b't' | b'f') if self.at_literal(&[b"true", b"false"]) => Ok(Kind::Bool),
            Some(b'n') if self.at_literal(&[b"null"]) => Ok(Kind::Null),
            Some(b't' | b'f' | b'n') => Err(self.syntax("unknown literal")),
            Some(&c) if c.is_ascii_graphic() => {
                Err(self.syntax(&format!("unexpected character {:?}", char::from(c))))
            }
            Some(&c) => Err(self.syntax(&format!("unexpected byte 0x{c:02x}"))),
        }
    }

    fn expect(&mut self, want: Kind) -> Result<(), Error> {
        let found = self.peek()?;
        if found != want {
            return Err(Error::new(format!(
                "expected {}, found {}",
                want.describe(),
                found.describe()
            )));
        }
        Ok(())
    }

    fn literal(&mut self, word: &'static [u8]) -> Result<(), Error> {
        if !self.try_literal(word) {
            return Err(self.syntax("unknown literal"));
        }
        Ok(())
    }

    /// Consumes `word` if the input continues with it.
    fn try_literal(&mut self, word: &'static [u8]) -> bool {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        let found = rest.starts_with(word);
        if found {
            self.pos += word.len();
        }
        found
    }

    /// Reads the number at the read position and returns its text.
    fn number_token(&mut self) -> Result<&'a str, Error> {
        let bytes = self.bytes;
        let start = self.pos;
        let end = scan_number(bytes, start).ok_or_else(|| self.syntax("malformed number"))?;
        self.pos = end;
        // The grammar admits ASCII only, so this cannot fail.
        std::str::from_utf8(bytes.get(start..end).unwrap_or_default())
            .map_err(|_| self.syntax("malformed number"))
    }

    /// Reads the string whose opening quote is at the read position. Strings without
    /// escapes are borrowed from the input.
    fn string_token(&mut self) -> Result<Cow<'a, str>, Error> {
        self.pos += 1;
        let start = self.pos;
        self.scan_plain();
        if self.bytes.get(self.pos) == Some(&b'"') {
            let text = self.utf8(start, self.pos)?;
            self.pos += 1;
            return Ok(Cow::Borrowed(text));
        }
        let mut owned = String::from(self.utf8(start, self.pos)?);
        loop {
            match self.bytes.get(self.pos) {
                None => return Err(self.syntax("unterminated string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(Cow::Owned(owned));
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let c = self.escape()?;
                    owned.push(c);
                }
                Some(_) => return Err(self.syntax("control character in string")),
            }
            let chunk = self.pos;
            self.scan_plain();
            owned.push_str(self.utf8(chunk, self.pos)?);
        }
    }

    /// Advances over string bytes that need no attention.
    fn scan_plain(&mut self) {
        while let Some(&c) = self.bytes.get(self.pos) {
            if c == b'"' || c == b'\\' || c < 0x20 {
                break;
            }
            self.pos += 1;
        }
    }

    fn utf8(&self, start: usize, end: usize) -> Result<&'a str, Error> {
        let bytes: &'a [u8] = self.bytes;
        std::str::from_utf8(bytes.get(start..end).unwrap_or_default()).map_err(|e| {
            Error::new(format!(
                "invalid JSON at byte {}: invalid UTF-8 in string",
                start + e.valid_up_to()
            ))
        })
    }

    /// Decodes the escape after a backslash, joining UTF-16 surrogate pairs.
    fn escape(&mut self) -> Result<char, Error> {
        let backslash = self.pos - 1;
        let invalid = |what: &str| syntax_at(backslash, what);
        let Some(&c) = self.bytes.get(self.pos) else {
            return Err(self.syntax("unterminated string"));
        };
        self.pos += 1;
        Ok(match c {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let unit = self.hex4()?;
                if (0xD800..0xDC00).contains(&unit) {
                    if self.bytes.get(self.pos..self.pos + 2) != Some(&b"\\u"[..]) {
                        return Err(invalid("unpaired UTF-16 surrogate in string"));
                    }
                    self.pos += 2;
                    let low = self.hex4()?;
                    if !(0xDC00..0xE000).contains(&low) {
                        return Err(invalid("unpaired UTF-16 surrogate in string"));
                    }
                    let code = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                    char::from_u32(code).ok_or_else(|| invalid("invalid \\u escape in string"))?
                } else {
                    char::from_u32(unit)
                        .ok_or_else(|| invalid("unpaired UTF-16 surrogate in string"))?
                }
            }
            _ => return Err(invalid("invalid escape in string")),
        })
    }

    fn hex4(&mut self) -> Result<u32, Error> {
        let digits = self.bytes.get(self.pos..self.pos + 4).unwrap_or_default();
        let value = (digits.len() == 4)
            .then(|| {
                digits.iter().try_fold(0u32, |acc, &d| {
                    char::from(d).to_digit(16).map(|v| acc << 4 | v)
                })
            })
            .flatten()
            .ok_or_else(|| self.syntax("invalid \\u escape in string"))?;
        self.pos += 4;
        Ok(value)
    }
}

fn syntax_at(pos: usize, what: &str) -> Error {
    Error::new(format!("invalid JSON at byte {pos}: {what}"))
}

/// The end of the JSON number starting at `i`, if one does.
fn scan_number(b: &[u8], mut i: usize) -> Option<usize> {
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            while digit(i) {
                i += 1;
            }
        }
        _ => return None,
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        if !digit(i) {
            return None;
        }
        while digit(i) {
            i += 1;
        }
    }
    if let Some(b'e' | b'E') = b.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = b.get(i) {
            i += 1;
        }
        if !digit(i) {
            return None;
        }
        while digit(i) {
            i += 1;
        }
    }
    Some(i)
}

/// Whether all of `text` is one JSON number.
fn is_number(text: &str) -> bool {
    scan_number(text.as_bytes(), 0) == Some(text.len())
}

/// The integer value of a JSON number's text (integral fractions and exponents allowed).
fn parse_integer(text: &str) -> Result<i128, Error> {
    if let Ok(value) = text.parse::<i128>() {
        return Ok(value);
    }
    let out_of_range = || Error::new(format!("{} is out of range", quote(text)));
    if !text.contains(['.', 'e', 'E']) {
        return Err(out_of_range());
    }
    let value: f64 = text.parse().map_err(|_| out_of_range())?;
    // Below 2^64 in magnitude, so the conversion to i128 is exact.
    if !value.is_finite() || value.abs() >= 18_446_744_073_709_551_616.0 {
        return Err(out_of_range());
    }
    if value.fract() != 0.0 {
        return Err(Error::new(format!("not an integer: {}", quote(text))));
    }
    Ok(value as i128)
}

fn parse_double(text: &str) -> Result<f64, Error> {
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() => Ok(value),
        _ => Err(Error::new(format!(
            "{} is out of range for double",
            quote(text)
        ))),
    }
}

/// `text` in quotes, shortened to [`MAX_QUOTED`] characters.
fn quote(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED) {
        Some((cut, _)) => format!("{:?}…", &text[..cut]),
        None => format!("{text:?}"),
    }
}
