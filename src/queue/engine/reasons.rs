//! The last nack reason of each record, on disk (`dque.reasons`): what a
//! dead letter names when a later attempt ends without a word, for every
//! handle and across reopens.
//!
//! An append-only file of frames: magic (u32), record id (u64), CRC-32 of
//! the record's payload (u32), reason length (u16), reason (UTF-8), CRC-32
//! of what precedes it but the magic (u32), little-endian. The payload's
//! CRC ties a frame to its record: ids a power loss took back from a
//! Turbo tail are given again, to other records. Each frame is one write, under the queue's lock (shared
//! mode: the cross-process mutex). A reader takes the last whole frame of
//! an id; bytes that are not a whole frame (a torn append) are passed over
//! a byte at a time until the next magic. Only `nack_with` and the dead
//! letter path touch the file: plain `nack`/`ack`/leases never do (a
//! decode error, the same at every attempt, stays in memory).

use std::fs::{self, File, OpenOptions};
use std::io::Write;

use super::Engine;
use crate::error::{Error, Result};
use crate::faults::{self, Durable, FaultOp};
use crate::log::layout::{REASONS_FILE, REASONS_TEMP};

const MAGIC: u32 = 0x4e53_5244; // "DRSN" little-endian
const FIXED: usize = 4 + 8 + 4 + 2 + 4;
/// Past this size an append first rewrites the file with the frames of
/// records still in the queue.
const COMPACT_AT: u64 = 64 * 1024;

/// One frame for record `id`, whose payload has CRC `payload`, and
/// `reason` (cut to 64 KiB at a character boundary).
fn frame(id: u64, payload: u32, reason: &str) -> Vec<u8> {
    let mut len = reason.len().min(u16::MAX as usize);
    while !reason.is_char_boundary(len) {
        len -= 1;
    }
    let mut bytes = Vec::with_capacity(FIXED + len);
    bytes.extend_from_slice(&MAGIC.to_le_bytes());
    bytes.extend_from_slice(&id.to_le_bytes());
    bytes.extend_from_slice(&payload.to_le_bytes());
    bytes.extend_from_slice(&(len as u16).to_le_bytes());
    bytes.extend_from_slice(&reason.as_bytes()[..len]);
    let crc = crc32fast::hash(&bytes[4..]);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

/// Every whole frame of `bytes`, in order: (id, payload CRC, reason).
fn frames(bytes: &[u8]) -> Vec<(u64, u32, String)> {
    let mut found = Vec::new();
    let mut at = 0;
    while at + FIXED <= bytes.len() {
        if let Some((id, payload, reason, len)) = frame_at(&bytes[at..]) {
            found.push((id, payload, reason));
            at += len;
        } else {
            at += 1;
        }
    }
    found
}

/// The whole frame at the start of `b`: id, payload CRC, reason, length.
fn frame_at(b: &[u8]) -> Option<(u64, u32, String, usize)> {
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
    if u32_at(0) != MAGIC {
        return None;
    }
    let id = u64::from_le_bytes(b[4..12].try_into().expect("8 bytes"));
    let payload = u32_at(12);
    let len = u16::from_le_bytes(b[16..18].try_into().expect("2 bytes")) as usize;
    let end = 18 + len;
    if end + 4 > b.len() || u32_at(end) != crc32fast::hash(&b[4..end]) {
        return None;
    }
    let reason = String::from_utf8(b[18..end].to_vec()).ok()?;
    Some((id, payload, reason, end + 4))
}

impl Engine {
    /// Appends `reason` as the last one of record `id`: durable before this
    /// returns, in every mode (one fsync, only for a nack that gives a
    /// reason). On an error the file is cut back to where it was.
    pub(super) fn store_reason(&mut self, id: u64, reason: &str) -> Result<()> {
        let path = self.dir.path().join(REASONS_FILE);
        let size = fs::metadata(&path).map_or(0, |m| m.len());
        // Twice what the last compaction kept: appends stay amortised
        // O(1) however many reasons are live.
        if size > COMPACT_AT.max(2 * self.reasons_kept) {
            self.compact_reasons()?;
        }
        let created = !path.exists();
        faults::check(FaultOp::Write, &path).map_err(|e| Error::io(&path, e))?;
        let mut file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        let before = file.metadata().map_err(|e| Error::io(&path, e))?.len();
        let payload = self.payload_crc(id);
        let written = file.write_all(&frame(id, payload, reason));
        let written = written.map_err(|e| Error::io(&path, e));
        if let Err(e) = written {
            // A torn frame would be passed over by readers; cut it anyway.
            let _ = file.set_len(before);
            return Err(e);
        }
        // Fsynced in every mode: `sync()`, `close()` and the Periodic
        // flusher would otherwise have to cover one more file, for a call
        // that runs only when a job fails with a reason.
        {
            let window = faults::syncing(&path);
            let synced = faults::check(FaultOp::Sync, &path)
                .and_then(|()| file.sync_data())
                .map_err(|e| Error::io(&path, e));
            drop(window);
            if synced.is_ok() {
                faults::synced(&path, Durable::File);
            }
            let synced = synced.and_then(|()| if created { self.dir.sync() } else { Ok(()) });
            if synced.is_err() {
                let _ = file.set_len(before);
            }
            self.refuse_on_sync_error(synced)?;
        }
        Ok(())
    }

    /// The last reason stored for record `id` (mapped), if any. A read; a
    /// file that cannot be read counts as naming none (the letter is still
    /// written).
    pub(super) fn stored_reason(&self, id: u64) -> Option<String> {
        let bytes = fs::read(self.dir.path().join(REASONS_FILE)).ok()?;
        let payload = self.payload_crc(id);
        frames(&bytes)
            .into_iter()
            .rev()
            .find(|(at, crc, _)| *at == id && *crc == payload)
            .map(|(_, _, reason)| reason)
    }

    /// The CRC-32 of mapped record `id`'s payload (0 if it is not mapped).
    fn payload_crc(&self, id: u64) -> u32 {
        self.find(id).map_or(0, |(segment, index)| {
            crc32fast::hash(segment.payload(index))
        })
    }

    /// Rewrites the file with the last frame of each record still in the
    /// queue (written to a temporary file, synced, renamed over it): the
    /// frames dropped name settled records, whose reasons no letter needs.
    fn compact_reasons(&mut self) -> Result<()> {
        let path = self.dir.path().join(REASONS_FILE);
        let temp = self.dir.path().join(REASONS_TEMP);
        let bytes = fs::read(&path).map_err(|e| Error::io(&path, e))?;
        let mut last = std::collections::BTreeMap::new();
        for (id, payload, reason) in frames(&bytes) {
            if self.is_unsettled(id) {
                last.insert(id, (payload, reason));
            }
        }
        let mut kept = Vec::new();
        for (id, (payload, reason)) in &last {
            kept.extend_from_slice(&frame(*id, *payload, reason));
        }
        let written = faults::check(FaultOp::Write, &temp)
            .and_then(|()| File::create(&temp))
            .and_then(|mut file| {
                file.write_all(&kept)?;
                let _window = faults::syncing(&temp);
                faults::check(FaultOp::Sync, &temp)?;
                file.sync_data()
            })
            .and_then(|()| {
                faults::synced(&temp, Durable::File);
                faults::check(FaultOp::Write, &path)?;
                fs::rename(&temp, &path)
            })
            .map_err(|e| Error::io(&temp, e));
        if let Err(e) = written {
            let _ = fs::remove_file(&temp);
            return Err(e);
        }
        faults::renamed(&temp, &path);
        self.reasons_kept = kept.len() as u64;
        self.dir.sync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_torn_bytes_are_passed_over() {
        let mut bytes = frame(7, 1, "first");
        let torn = frame(8, 2, "torn");
        bytes.extend_from_slice(&torn[..torn.len() - 3]);
        bytes.extend_from_slice(&frame(7, 3, "second é"));
        bytes.extend_from_slice(&[0x44, 0x52]);
        assert_eq!(
            frames(&bytes),
            [(7, 1, "first".to_string()), (7, 3, "second é".to_string())]
        );
    }

    #[test]
    fn a_long_reason_is_cut_at_a_character_boundary() {
        let long = "é".repeat(40_000);
        let found = frames(&frame(1, 0, &long));
        assert_eq!(found[0].2.len(), 65_534);
    }
}
