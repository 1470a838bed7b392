//! Bounded waits on the core's executor.

use std::future::Future;
use std::time::Duration;

/// `fut`'s output, or `None` once `limit` has passed.
pub async fn with_timeout<T>(limit: Duration, fut: impl Future<Output = T>) -> Option<T> {
    futures_lite::future::or(async { Some(fut.await) }, async {
        glommio::timer::sleep(limit).await;
        None
    })
    .await
}
