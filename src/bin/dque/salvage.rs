//! `dque salvage`: the records still readable in a damaged segment file.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use dque::{Options, RawQueue, Salvage, SalvagedRecord};

use crate::fail::Failure;
use crate::push_pop::{patiently, MAX_ITEM_BYTES};
use crate::records::{Format, Shown};

/// Options of `dque salvage`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Records before the damage keep their ids and acks; records found \
after it (whole, with a matching CRC) have unknown ids, and whether they were acked is unknown: \
--into pushes them too, so an item may come twice, never not at all.

Example, after `dque repair q` moved a segment aside:
  dque salvage q/quarantine/00000000000000000002.seg
  dque salvage q/quarantine/00000000000000000002.seg --into rescued"
)]
pub struct SalvageArgs {
    /// A segment file, such as one `dque repair` moved into DIR/quarantine/.
    pub file: PathBuf,
    /// Push every record not known to be acked, as stored, into this queue
    /// (any codec: most likely the one the segment came from; a raw-bytes
    /// queue is created if it is missing), in file order.
    #[arg(long, value_name = "QUEUE")]
    pub into: Option<PathBuf>,
    #[command(flatten)]
    pub format: Format,
}

pub fn run(args: &SalvageArgs) -> Result<ExitCode, Failure> {
    let found = dque::salvage(&args.file).map_err(Failure::other)?;
    match &args.into {
        Some(queue) => push_into(queue, &found)?,
        None => crate::output::written(list(args, &found))?,
    }
    Ok(ExitCode::SUCCESS)
}

fn list(args: &SalvageArgs, found: &Salvage) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    if !args.format.json {
        let header = match found.header {
            Some((number, first_id)) => format!("segment {number}, first id {first_id}"),
            None => "header unreadable".into(),
        };
        let damage = match found.damaged_at {
            Some(offset) => format!("damaged at byte {offset}"),
            None => "no damage before the clean end".into(),
        };
        writeln!(out, "{}: {header}; {damage}", args.file.display())?;
    }
    for record in &found.records {
        print(&mut out, record, &args.format)?;
    }
    Ok(())
}

fn print(out: &mut impl Write, record: &SalvagedRecord, format: &Format) -> std::io::Result<()> {
    let shown = Shown::new(&record.payload, format);
    if format.json {
        let mut value = serde_json::json!({
            "offset": record.offset,
            "id": record.id,
            "settled": record.settled,
        });
        shown.add_to(&mut value);
        return writeln!(out, "{value}");
    }
    let id = record.id.map_or("?".into(), |id| id.to_string());
    let state = match record.settled {
        Some(true) => "acked",
        Some(false) => "pending",
        None => "unknown",
    };
    writeln!(
        out,
        "offset {:<8} id {id:<6} {state:<7} {shown}",
        record.offset
    )
}

fn push_into(queue: &std::path::Path, found: &Salvage) -> Result<(), Failure> {
    let fail = |e| Failure::from_queue(queue, e);
    let items: Vec<Vec<u8>> = found
        .records
        .iter()
        .filter(|record| record.maybe_pending())
        .map(|record| record.payload.clone())
        .collect();
    let options = Options::new().max_item_bytes(MAX_ITEM_BYTES);
    // An existing queue takes the bytes whatever its codec: they are put
    // back as they were stored, most likely into the queue they came from.
    let target = patiently(|| match RawQueue::open_encoded_with(queue, &options) {
        Err(dque::Error::NotFound { .. }) => RawQueue::create_with(queue, &options),
        other => other,
    })
    .map_err(fail)?;
    target.enqueue_batch(&items).map_err(fail)?;
    target.close().map_err(fail)?;
    outln!(
        "pushed {} of {} records into {} (the other {} were acked)",
        items.len(),
        found.records.len(),
        queue.display(),
        found.records.len() - items.len()
    )?;
    Ok(())
}
