//! Concurrency limits and pause on Redis (issue 27): a limit is a reqless
//! throttle, a pause qless's (`lua/limits.lua`; QLESS.md, "Limits and
//! pause"). Written once for the blocking and the async handle.

use super::core::{Core, Transport};
use super::encoding::{array_of, int_of, text_of};
use crate::error::Result;
use crate::jobs::limits::{check_limit_name, check_max, Limit};

impl Core {
    pub(crate) async fn set_paused(&self, t: &impl Transport, paused: bool) -> Result<()> {
        let command = if paused { "pause" } else { "resume" };
        self.call(t, command, &[self.queue.as_bytes()])
            .await
            .map(drop)
    }

    pub(crate) async fn is_paused(&self, t: &impl Transport) -> Result<bool> {
        let reply = self.call(t, "paused", &[self.queue.as_bytes()]).await?;
        Ok(int_of(&reply)? == 1)
    }

    pub(crate) async fn set_limit(&self, t: &impl Transport, name: &str, max: u32) -> Result<()> {
        check_limit_name(name)?;
        check_max(name, max)?;
        let max = max.to_string();
        self.call(
            t,
            "limit_set",
            &[self.queue.as_bytes(), name.as_bytes(), max.as_bytes()],
        )
        .await
        .map(drop)
    }

    pub(crate) async fn remove_limit(&self, t: &impl Transport, name: &str) -> Result<bool> {
        check_limit_name(name)?;
        let reply = self
            .call(t, "limit_remove", &[self.queue.as_bytes(), name.as_bytes()])
            .await?;
        Ok(int_of(&reply)? == 1)
    }

    pub(crate) async fn limits(&self, t: &impl Transport) -> Result<Vec<Limit>> {
        let reply = self.call(t, "limits", &[self.queue.as_bytes()]).await?;
        array_of(&reply)?
            .chunks(3)
            .map(|triple| {
                let number = |at: usize| -> Result<u32> {
                    let value = triple.get(at).map_or(Ok(0), int_of)?;
                    Ok(u32::try_from(value.max(0)).unwrap_or(u32::MAX))
                };
                Ok(Limit {
                    name: triple.first().map(text_of).unwrap_or_default(),
                    max: number(1)?,
                    running: number(2)?,
                })
            })
            .collect()
    }
}
