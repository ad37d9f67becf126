//! The wait for a stream's next read, the stop signal or the request's timer, whichever comes
//! first, with the read first.
//!
//! `tokio::select!` polls every branch each time the task wakes. Streaming, nearly every wake is
//! a read, and polling the stop signal (two mutexes: the token's and its `Notify`'s) and the
//! timer after each one cost about as much as the read's own SSE framing. Here the stop signal
//! and the timer are polled with a waker of their own, which notes that one of them woke the task
//! before waking it; they are polled again only after such a wake (or a reset of the timer),
//! while each read costs one flag swap and one `AtomicWaker` registration.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::Stream;
use futures::task::AtomicWaker;

/// What ended a wait.
pub(super) enum Next<T> {
    /// The stream's next item (`None`: it ended).
    Read(Option<T>),
    Stopped,
    Timer,
}

/// The waker the stop signal and the timer are polled with.
struct SideWake {
    /// Set by a wake from the stop signal or the timer; cleared when they are polled.
    due: AtomicBool,
    /// The task to wake.
    task: AtomicWaker,
}

impl Wake for SideWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.due.store(true, Ordering::Release);
        self.task.wake();
    }
}

/// One request's waits (created once per request).
pub(super) struct Waits {
    side: Arc<SideWake>,
    waker: Waker,
}

impl Waits {
    pub fn new() -> Waits {
        // Due at first: nothing has been polled with this waker yet.
        let side = Arc::new(SideWake { due: AtomicBool::new(true), task: AtomicWaker::new() });
        Waits { waker: Waker::from(Arc::clone(&side)), side }
    }

    /// After the timer was reset. tokio's timer, reset, wakes the waker it was last polled with
    /// (here the side waker), so this is belt and braces: the wait stays right without relying
    /// on that.
    pub fn timer_moved(&self) {
        self.side.due.store(true, Ordering::Release);
    }

    /// The next of: an item of `body` (always first when one is ready), the stop signal, the
    /// timer.
    pub async fn next<S: Stream + Unpin>(
        &self,
        body: &mut S,
        mut stop: Pin<&mut impl Future<Output = ()>>,
        mut timer: Pin<&mut impl Future<Output = ()>>,
    ) -> Next<S::Item> {
        poll_fn(|cx| {
            if let Poll::Ready(item) = Pin::new(&mut *body).poll_next(cx) {
                return Poll::Ready(Next::Read(item));
            }
            // Registered before the flag is read: a wake that sets it after the read below
            // finds this task's waker and wakes it again.
            self.side.task.register(cx.waker());
            if self.side.due.swap(false, Ordering::AcqRel) {
                let mut side = Context::from_waker(&self.waker);
                if stop.as_mut().poll(&mut side).is_ready() {
                    return Poll::Ready(Next::Stopped);
                }
                if timer.as_mut().poll(&mut side).is_ready() {
                    return Poll::Ready(Next::Timer);
                }
            }
            Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt;
    use tokio::sync::mpsc;
    use tokio_util::sync::CancellationToken;

    use super::*;

    /// A wait that would never end fails the test instead of hanging it (time is paused: the
    /// runtime jumps to the limit when nothing else can happen).
    async fn within<T>(wait: impl Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(7200), wait).await.expect("the wait ended")
    }

    fn channel() -> (mpsc::Sender<u32>, impl Stream<Item = u32> + Unpin) {
        let (tx, mut rx) = mpsc::channel(4);
        (tx, futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }

    #[tokio::test(start_paused = true)]
    async fn reads_come_first_then_the_stop_and_the_timer_are_heard() {
        let (tx, mut body) = channel();
        let token = CancellationToken::new();
        let stop = token.cancelled();
        let timer = tokio::time::sleep(Duration::from_secs(10));
        tokio::pin!(stop, timer);
        let waits = Waits::new();
        tx.send(1).await.unwrap();
        token.cancel();
        // A ready read wins over a stop already signalled.
        assert!(matches!(waits.next(&mut body, stop.as_mut(), timer.as_mut()).await, Next::Read(Some(1))));
        assert!(matches!(waits.next(&mut body, stop.as_mut(), timer.as_mut()).await, Next::Stopped));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_during_a_wait_for_data_wakes_it() {
        let (_tx, mut body) = channel();
        let token = CancellationToken::new();
        let stop = token.cancelled();
        let timer = tokio::time::sleep(Duration::from_secs(3600));
        tokio::pin!(stop, timer);
        let waits = Waits::new();
        let later = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            later.cancel();
        });
        assert!(matches!(waits.next(&mut body, stop.as_mut(), timer.as_mut()).await, Next::Stopped));
    }

    #[tokio::test(start_paused = true)]
    async fn the_timer_fires_between_reads_and_after_a_reset() {
        let (tx, mut body) = channel();
        let token = CancellationToken::new();
        let stop = token.cancelled();
        let start = tokio::time::Instant::now();
        let timer = tokio::time::sleep_until(start + Duration::from_secs(1));
        tokio::pin!(stop, timer);
        let waits = Waits::new();
        let feeder = tokio::spawn(async move {
            for i in 0..3 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                tx.send(i).await.unwrap();
            }
            tx
        });
        for i in 0..3 {
            assert!(
                matches!(within(waits.next(&mut body, stop.as_mut(), timer.as_mut())).await, Next::Read(Some(n)) if n == i)
            );
        }
        assert!(matches!(within(waits.next(&mut body, stop.as_mut(), timer.as_mut())).await, Next::Timer));
        assert_eq!(tokio::time::Instant::now() - start, Duration::from_secs(1));
        // Moved later: the wait now ends at the new deadline, not before.
        timer.as_mut().reset(start + Duration::from_secs(5));
        waits.timer_moved();
        assert!(matches!(within(waits.next(&mut body, stop.as_mut(), timer.as_mut())).await, Next::Timer));
        assert_eq!(tokio::time::Instant::now() - start, Duration::from_secs(5));
        // Moved again with the body idle: heard at its deadline.
        timer.as_mut().reset(start + Duration::from_secs(60));
        waits.timer_moved();
        let _tx = feeder.await.unwrap();
        assert!(matches!(within(waits.next(&mut body, stop.as_mut(), timer.as_mut())).await, Next::Timer));
        assert_eq!(tokio::time::Instant::now() - start, Duration::from_secs(60));
        drop(_tx);
        assert!(matches!(within(waits.next(&mut body, stop.as_mut(), timer.as_mut())).await, Next::Read(None)));
    }

    /// Many reads and a stop from another thread: the stop is always heard.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stop_from_another_thread_is_never_lost() {
        for _ in 0..200 {
            let (tx, mut body) = channel();
            let token = CancellationToken::new();
            let stop = token.cancelled();
            let timer = tokio::time::sleep(Duration::from_secs(3600));
            tokio::pin!(stop, timer);
            let waits = Waits::new();
            let canceller = token.clone();
            let feeder = tokio::spawn(async move {
                for i in 0..50u32 {
                    if tx.send(i).await.is_err() {
                        return;
                    }
                    tokio::task::yield_now().await;
                }
                canceller.cancel();
                // The channel stays open: only the stop can end the wait.
                tokio::time::sleep(Duration::from_secs(3600)).await;
            });
            let mut reads = 0;
            let ended = tokio::time::timeout(Duration::from_secs(10), async {
                loop {
                    match waits.next(&mut body, stop.as_mut(), timer.as_mut()).await {
                        Next::Read(Some(_)) => reads += 1,
                        other => return matches!(other, Next::Stopped),
                    }
                }
            })
            .await;
            assert_eq!(ended, Ok(true), "after {reads} reads");
            feeder.abort();
            let _ = body.next().await;
        }
    }
}
