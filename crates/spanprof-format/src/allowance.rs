//! What one decode may allocate: the [`Budget`] a `wire::Reader` draws from, and the [`Pool`]
//! that every message being decoded at once shares. Below `wire`; `budget` re-exports it.

use std::cell::Cell;

use crate::error::{FormatError, DECODED_BASE, DECODED_PER_BYTE};

/// Memory shared by every message being decoded at once (a server's in-flight budget), which
/// a `Budget` draws from as its decoder allocates: the budget of one message bounds what
/// one bomb takes, a pool bounds what all of them take together.
pub trait Pool {
    /// Takes `bytes` more for the message; false when the pool has no room for them.
    fn take(&self, bytes: usize) -> bool;
}

/// Bytes a [`Budget`] draws from its [`Pool`] at a time, so that the pool is not asked for
/// every string.
pub(crate) const POOL_DRAW: usize = 256 << 10;

/// What a decoder may still allocate for one message.
pub(crate) struct Budget<'p> {
    left: Cell<usize>,
    limit: usize,
    encoded: usize,
    exceeded: Cell<bool>,
    pool: Option<&'p dyn Pool>,
    /// Drawn from the pool and not taken yet.
    credit: Cell<usize>,
    /// Drawn from the pool in all.
    drawn: Cell<usize>,
    /// The pool refused to give more: the decoder's error is [`FormatError::NoRoom`].
    pool_refused: Cell<bool>,
}

impl std::fmt::Debug for Budget<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("left", &self.left.get())
            .field("limit", &self.limit)
            .field("drawn", &self.drawn.get())
            .finish_non_exhaustive()
    }
}

impl<'p> Budget<'p> {
    /// The budget of a message of `encoded` bytes.
    pub(crate) fn for_message(encoded: usize) -> Self {
        Budget::drawing(encoded, None)
    }

    /// The budget of a message of `encoded` bytes, whose allocations are also drawn from
    /// `pool` when there is one.
    pub(crate) fn drawing(encoded: usize, pool: Option<&'p dyn Pool>) -> Self {
        let limit = decoded_limit(encoded);
        Budget {
            left: Cell::new(limit),
            limit,
            encoded,
            exceeded: Cell::new(false),
            pool,
            credit: Cell::new(0),
            drawn: Cell::new(0),
            pool_refused: Cell::new(false),
        }
    }

    /// Takes `bytes`; false (and from then on [`Budget::exceeded`]) when fewer are left, in
    /// the message's budget or in the pool.
    #[inline(always)]
    pub(crate) fn take(&self, bytes: usize) -> bool {
        match self.left.get().checked_sub(bytes) {
            Some(left) => {
                self.left.set(left);
                match self.pool {
                    None => true,
                    Some(pool) => self.draw(pool, bytes),
                }
            }
            None => {
                self.exceeded.set(true);
                false
            }
        }
    }

    /// Takes `bytes` from what was drawn from `pool`, drawing more when it is short.
    #[inline]
    fn draw(&self, pool: &dyn Pool, bytes: usize) -> bool {
        if let Some(credit) = self.credit.get().checked_sub(bytes) {
            self.credit.set(credit);
            return true;
        }
        let need = bytes - self.credit.get();
        // In steps of POOL_DRAW, but never past the message's own limit (`left` is what it may
        // still take after these bytes).
        let more = POOL_DRAW
            .min(need.saturating_add(self.left.get()))
            .max(need);
        if pool.take(more) {
            self.drawn.set(self.drawn.get() + more);
            self.credit.set(more - need);
            true
        } else {
            self.exceeded.set(true);
            self.pool_refused.set(true);
            false
        }
    }

    /// Takes the memory of `n` values of `T`.
    #[inline(always)]
    pub(crate) fn take_n<T>(&self, n: usize) -> bool {
        self.take(n.saturating_mul(std::mem::size_of::<T>()))
    }

    /// Whether a [`Budget::take`] failed: the decoder's error is then this budget's.
    pub(crate) fn exceeded(&self) -> bool {
        self.exceeded.get()
    }

    /// What the decoder took so far.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.limit - self.left.get()
    }

    /// Takes what this budget counted (an estimate of what a derived decoder will allocate)
    /// from `pool`, when there is one: [`FormatError::NoRoom`] when it has no room.
    pub(crate) fn take_estimate_from(
        &self,
        pool: Option<&dyn Pool>,
        what: &'static str,
    ) -> Result<(), FormatError> {
        match pool {
            Some(pool) if !pool.take(self.limit - self.left.get()) => {
                Err(FormatError::NoRoom { what, drawn: 0 })
            }
            _ => Ok(()),
        }
    }

    /// The error of a decoder that ran out, naming `what` it was decoding.
    pub(crate) fn error(&self, what: &'static str) -> FormatError {
        if self.pool_refused.get() {
            return FormatError::NoRoom {
                what,
                drawn: self.drawn.get(),
            };
        }
        FormatError::DecodedTooLarge {
            what,
            limit: self.limit,
            encoded: self.encoded,
        }
    }
}

/// Bytes a message of `encoded` bytes may take once decoded.
pub fn decoded_limit(encoded: usize) -> usize {
    encoded
        .saturating_mul(DECODED_PER_BYTE)
        .saturating_add(DECODED_BASE)
}
