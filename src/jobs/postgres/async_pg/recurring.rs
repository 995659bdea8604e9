//! Recurring jobs of [`AsyncPgJobs`](super::AsyncPgJobs): the statements
//! of the blocking handle's (`postgres/recurring.rs`), on the async link.

use std::time::SystemTime;

use super::Inner;
use crate::error::Result;
use crate::jobs::clock::{from_unix_ms, unix_ms};
use crate::jobs::postgres::errors::{db, sent};
use crate::jobs::postgres::ms;
use crate::jobs::postgres::recurring::{info_of, ticks_key, Firing, Sql};
use crate::jobs::recurring::{Schedule, ScheduleInfo};

impl Inner {
    pub(super) async fn add_schedule(&self, schedule: Schedule) -> Result<ScheduleInfo> {
        schedule.check()?;
        let sql = Sql::new(&self.tables);
        let first = ms(schedule.first_tick(self.now())?);
        let link = self.link().await?;
        let row = link
            .query_one(
                &sql.upsert,
                &[
                    &self.qno,
                    &schedule.name().to_owned(),
                    &schedule.to_json(),
                    &ticks_key(&schedule),
                    &first,
                ],
            )
            .await
            .map_err(sent)?;
        self.due_schedules.forget();
        let next: i64 = row.get(0);
        Ok(ScheduleInfo {
            schedule,
            next_run: from_unix_ms(next.max(0) as u64),
        })
    }

    pub(super) async fn remove_schedule(&self, name: &str) -> Result<bool> {
        let sql = Sql::new(&self.tables);
        let link = self.link().await?;
        let n = link
            .execute(&sql.delete, &[&self.qno, &name.to_owned()])
            .await
            .map_err(sent)?;
        self.due_schedules.forget();
        Ok(n > 0)
    }

    pub(super) async fn list_schedules(&self) -> Result<Vec<ScheduleInfo>> {
        let sql = Sql::new(&self.tables);
        let link = self.link().await?;
        let rows = link.query(&sql.list, &[&self.qno]).await.map_err(db)?;
        rows.iter().map(info_of).collect()
    }

    /// Fires the schedules due at `now`; the number of jobs added.
    pub(super) async fn fire_due(&self, now: SystemTime) -> Result<usize> {
        let schedules = self.list_schedules().await?;
        let (firings, earliest) = Firing::plan(&schedules, now)?;
        let sql = Sql::new(&self.tables);
        let link = self.link().await?;
        let mut added = 0;
        for firing in &firings {
            let row = link
                .query_one(&sql.fire, &firing.params(&self.qno, &ms(now), &self.queue))
                .await
                .map_err(sent)?;
            added += row.get::<_, i64>(0) as usize;
        }
        self.due_schedules.remember(earliest, unix_ms(now));
        Ok(added)
    }

    /// As `fire_due` for a lease: an error does not stop the lease.
    pub(super) async fn fire_due_quietly(&self, now: SystemTime) {
        if self.fire_due(now).await.is_err() {
            self.due_schedules.remember(None, unix_ms(now));
        }
    }
}
