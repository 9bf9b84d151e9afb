//! Work spread over threads: a small pool whose helpers spin between jobs, so that the hundred-odd
//! products of a decode step are not each a thread wake-up.
//!
//! **Why not rayon's pool directly.** A rayon job wakes a sleeping worker and puts the caller to
//! sleep until it is done; in the browser each wake-up is an `Atomics.wait`/`notify` round trip
//! between Web Workers. Measured in Chromium on the default model (2 cores): one thread decoded
//! 14.0 tok/s, two threads through rayon 18.5 (1.3×), where natively rayon gives 1.9×. Here the
//! caller works too, and helpers spin on an atomic counter for a while after each job (about a
//! millisecond: the gap between two products is microseconds, between two tokens a little more)
//! before they park, so a step pays at most one wake-up.
//!
//! **Where the helpers come from.** Natively they are `std` threads (one per core but the
//! caller's), started on first use. In the browser's threaded build `std::thread::spawn` does not
//! exist: each helper is a Web Worker that the page starts on the same shared memory and that
//! calls [`help`], which never returns; [`expect_helpers`] says how many to split work for. The
//! pool never waits for a helper: the caller claims tasks too, so a helper that is late, or never
//! comes, slows a job down but cannot stall it (the page's start of its workers is not a step a
//! load can hang on: Firefox's `new Worker` inside a worker blocked about one start in a hundred,
//! see ARCHITECTURE.md). The plain wasm build has no helper: everything runs on the calling thread.
//!
//! **The protocol.** A job is `tasks` calls of one `Fn(usize)`. Its epoch and the next task index
//! share one 64-bit atomic, so a helper claims task `i` of epoch `e` only while `e` is current: a
//! helper that saw an old epoch can never run a new job's task with an old job's function. A new
//! job first closes the last one in an epoch of its own with no task to claim, then writes its
//! task count, then opens its epoch: a helper still claiming in the last epoch that reads the new
//! count cannot win the exchange. The caller returns only when every claimed task has finished,
//! so the function it lent outlives every call. One job at a time: a second caller (another
//! thread of a native test, a product inside a task) runs its tasks itself.

// The plain wasm build has no helpers: the helpers' side of the pool goes unused there.
#![cfg_attr(all(target_family = "wasm", not(target_feature = "atomics")), allow(dead_code))]

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock, TryLockError};

/// Polls of the job counter a helper makes before it parks: about a millisecond natively, where
/// each poll pauses (`spin_loop`). wasm has no pause instruction, so there a poll is a load and a
/// compare: 2^18 such polls took 0.09 ms in Node's V8 (a 2.6 GHz Zen 4), and a helper parks
/// whenever the engine's thread works alone for longer (the sampler, each step). 2^22 (1.5 ms)
/// measured a little faster in Chromium but is not taken: a helper spinning that long takes a
/// core the browser's own threads want, and the load's one-step timing of the pool then chose
/// one thread for SmolLM2 in two of nineteen loads (ARCHITECTURE.md, "A late helper's last task,
/// in the browser").
const SPIN_POLLS: u32 = 1 << 18;

/// Polls between two offers of the core to another thread (`yield_now`) while a thread spins
/// (waiting for a job, or for the helpers to finish one): about 4 µs. On an idle machine a yield
/// returns at once; on a busy one the thread it waits for (a helper that holds a task,
/// descheduled) or another program gets the core instead of a spin. Natively with one of two
/// cores kept busy by another process, two threads decoded SmolLM2 at 75-80 tok/s without yields
/// (one thread: 118), 100-105 yielding every 16 µs, 102-108 every 4 µs, 79-88 every 1 µs; the
/// Gemma 3 1B shape 12.5-13.5 -> 16.1-16.4 (one thread: 15.2); idle, the same within the runs'
/// noise (ARCHITECTURE.md, "The pool on a busy machine"). The browser's `yield_now` does nothing.
const YIELD_POLLS: u32 = 1 << 10;

/// One poll of a spin: a pause, or every [`YIELD_POLLS`] polls the core offered to others.
#[inline(always)]
fn spin(poll: u32) {
    if poll % YIELD_POLLS == YIELD_POLLS - 1 {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// The next task of an epoch that has none to claim: between two jobs (`Pool::run`).
const CLOSED: u32 = u32::MAX;

/// The function of the current job, lent by `run`'s caller for as long as the job lasts.
type Task<'a> = &'a (dyn Fn(usize) + Sync);

struct Pool {
    /// `epoch << 32 | next task`.
    counter: AtomicU64,
    /// The current job's tasks.
    tasks: AtomicUsize,
    /// Tasks of the current job finished.
    done: AtomicUsize,
    /// The current job's function: its data and vtable pointers, written before its epoch.
    job: Mutex<Option<Task<'static>>>,
    /// One job at a time (a second caller runs its own tasks).
    running: Mutex<()>,
    /// Helpers parked on `wake`.
    parked: AtomicU32,
    park: Mutex<()>,
    wake: Condvar,
    /// Helpers the work is split for, and that take it: all of them natively; in the browser,
    /// [`expect_helpers`]. Helper `i` with `i >= helpers` waits on `benched` (a helper on a core
    /// that does not help would only steal time from the others).
    helpers: AtomicUsize,
    bench: Mutex<()>,
    benched: Condvar,
    /// Helpers that have started (in the browser, the workers that called [`help`]).
    started: AtomicUsize,
}

/// The pool; natively its helpers are started on first use.
fn pool() -> &'static Pool {
    static POOL: OnceLock<&'static Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let helpers = native_helper_count();
        let pool: &'static Pool = Box::leak(Box::new(Pool {
            counter: AtomicU64::new(0),
            tasks: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            job: Mutex::new(None),
            running: Mutex::new(()),
            parked: AtomicU32::new(0),
            park: Mutex::new(()),
            wake: Condvar::new(),
            helpers: AtomicUsize::new(helpers),
            bench: Mutex::new(()),
            benched: Condvar::new(),
            started: AtomicUsize::new(0),
        }));
        #[cfg(not(target_family = "wasm"))]
        for _ in 0..helpers {
            std::thread::Builder::new().name("nucleus-cpu".into()).spawn(|| help()).expect("spawn a CPU engine thread");
        }
        pool
    })
}

/// Threads besides the caller's natively (`NUCLEUS_THREADS` or one per core); none in the
/// browser until [`expect_helpers`].
fn native_helper_count() -> usize {
    #[cfg(not(target_family = "wasm"))]
    {
        std::env::var("NUCLEUS_THREADS")
            .ok()
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1)
            - 1
    }
    #[cfg(target_family = "wasm")]
    {
        0
    }
}

/// A helper's whole life, on the thread that calls it: it never returns. Natively each thread
/// the pool starts runs it; in the browser's threaded build, each helper Web Worker calls it (the
/// `runThreadHelper` export) once its instance of the shared module has started.
pub fn help() -> ! {
    let pool = pool();
    let index = pool.started.fetch_add(1, Ordering::SeqCst);
    pool.help(index)
}

/// In the browser's threaded build: split work for `helpers` threads besides the caller's (the
/// helper workers the page starts, or fewer: those that started, or as many as measurably help).
/// Any number is safe: a task no helper claims, the caller runs.
#[cfg(all(target_family = "wasm", target_feature = "atomics"))]
pub fn expect_helpers(helpers: usize) {
    pool().set_helpers(helpers);
}

/// Helpers that have started ([`help`] called).
#[cfg_attr(not(all(target_family = "wasm", target_feature = "atomics")), allow(dead_code))]
pub fn helpers_running() -> usize {
    pool().started.load(Ordering::SeqCst)
}

impl Pool {
    /// Helper `index`'s life: wait until it is one of those that help, wait for a job, take its
    /// tasks until none is left, again.
    fn help(&self, index: usize) -> ! {
        let mut seen = self.epoch();
        loop {
            self.wait_until_helping(index);
            let epoch = self.wait_for_job(seen);
            seen = epoch;
            let Some(job) = *self.job.lock().unwrap_or_else(|e| e.into_inner()) else { continue };
            // A helper benched mid-job stops claiming at once.
            while index < self.helpers.load(Ordering::Relaxed)
                && let Some(task) = self.claim(epoch)
            {
                job(task);
                self.done.fetch_add(1, Ordering::Release);
            }
        }
    }

    /// Parks helper `index` while the work is split for fewer helpers.
    fn wait_until_helping(&self, index: usize) {
        if index < self.helpers.load(Ordering::SeqCst) {
            return;
        }
        let mut guard = self.bench.lock().unwrap_or_else(|e| e.into_inner());
        while index >= self.helpers.load(Ordering::SeqCst) {
            guard = self.benched.wait(guard).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Splits work for `helpers` helpers; those with a higher index wait on the bench.
    #[cfg_attr(not(all(target_family = "wasm", target_feature = "atomics")), allow(dead_code))]
    fn set_helpers(&self, helpers: usize) {
        let _guard = self.bench.lock().unwrap_or_else(|e| e.into_inner());
        self.helpers.store(helpers, Ordering::SeqCst);
        self.benched.notify_all();
    }

    fn epoch(&self) -> u32 {
        (self.counter.load(Ordering::Acquire) >> 32) as u32
    }

    /// Spins, then parks, until the epoch is not `seen`; returns the new one.
    fn wait_for_job(&self, seen: u32) -> u32 {
        for poll in 0..SPIN_POLLS {
            let epoch = self.epoch();
            if epoch != seen {
                return epoch;
            }
            spin(poll);
        }
        let mut guard = self.park.lock().unwrap_or_else(|e| e.into_inner());
        self.parked.fetch_add(1, Ordering::SeqCst);
        while self.epoch() == seen {
            guard = self.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
        }
        self.parked.fetch_sub(1, Ordering::SeqCst);
        self.epoch()
    }

    /// The next task of job `epoch`, if that job is still the current one and has tasks left.
    /// The task count is read after the counter and before the exchange: a count written for a
    /// later job is written after the counter closed this epoch (`run`), so the exchange fails.
    fn claim(&self, epoch: u32) -> Option<usize> {
        let mut current = self.counter.load(Ordering::Acquire);
        loop {
            let (job_epoch, next) = ((current >> 32) as u32, (current & 0xffff_ffff) as usize);
            if job_epoch != epoch || next >= self.tasks.load(Ordering::Acquire) {
                return None;
            }
            match self.counter.compare_exchange_weak(current, current + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(next),
                Err(actual) => current = actual,
            }
        }
    }

    fn run(&self, tasks: usize, task: Task<'_>) {
        self.run_after(tasks, task, || ());
    }

    /// [`run`](Self::run), the caller running `first()` before it takes any task (the helpers
    /// start on the tasks meanwhile); its result. A panic in `first` reaches the caller only
    /// after the job has ended, as every lent task must have.
    fn run_after<R>(&self, tasks: usize, task: Task<'_>, first: impl FnOnce() -> R) -> R {
        let running = match self.running.try_lock() {
            Ok(running) => running,
            // A panic that left the lock poisoned left no job open (below): the pool is free.
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => {
                // Another job holds the pool (or this is a task of one): this caller's tasks are
                // its own.
                let result = first();
                (0..tasks).for_each(task);
                return result;
            }
        };
        // SAFETY: the lifetime is erased for as long as the job is current; this function returns
        // (or unwinds) only after every task a helper claimed has finished (`done + mine ==
        // claimed` below), and a helper calls the function only for a task it claimed in this
        // job's epoch.
        let lent: Task<'static> = unsafe { std::mem::transmute::<Task<'_>, Task<'static>>(task) };
        // The last job is closed for good (an epoch of its own, no task left to claim) before
        // this one's count is written: a helper still claiming in the last epoch that reads this
        // count can then no longer claim (`claim`'s exchange sees the closed counter). Without it
        // such a helper could take task `last count` with the last job's function, whose caller
        // had returned: CI's test run once died of it (SIGSEGV).
        let closed = self.epoch().wrapping_add(1);
        self.counter.store(u64::from(closed) << 32 | u64::from(CLOSED), Ordering::SeqCst);
        *self.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(lent);
        self.tasks.store(tasks, Ordering::Release);
        self.done.store(0, Ordering::Release);
        let epoch = closed.wrapping_add(1);
        self.counter.store(u64::from(epoch) << 32, Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) > 0 {
            let _guard = self.park.lock().unwrap_or_else(|e| e.into_inner());
            self.wake.notify_all();
        }
        // A panic here (in `first` or in one of the caller's tasks) goes on only once every task
        // a helper claimed has finished: they borrow what the caller lent.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(first));
        let mut mine = 0;
        let own = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            while let Some(index) = self.claim(epoch) {
                mine += 1;
                task(index);
            }
        }));
        // No task is left to claim (all were, or a panic cut the caller's claiming short): the
        // job closed, the tasks claimed are those to wait for.
        let counter = self.counter.swap(u64::from(epoch) << 32 | u64::from(CLOSED), Ordering::SeqCst);
        let claimed = ((counter & 0xffff_ffff) as usize).min(tasks);
        let mut poll = 0u32;
        while self.done.load(Ordering::Acquire) + mine < claimed {
            spin(poll);
            poll = poll.wrapping_add(1);
        }
        *self.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
        drop(running);
        match (result, own) {
            (Ok(result), Ok(())) => result,
            (Err(panic), _) | (_, Err(panic)) => std::panic::resume_unwind(panic),
        }
    }
}

/// Threads the kernels spread their work over: the caller's and the pool's helpers.
pub fn threads() -> usize {
    pool().helpers.load(Ordering::Relaxed) + 1
}

/// Calls `f` on each task, spread over the threads (the caller's included).
pub fn for_each_task<T: Send>(tasks: Vec<T>, f: impl Fn(T) + Sync + Send) {
    if tasks.len() <= 1 || pool().helpers.load(Ordering::Relaxed) == 0 {
        tasks.into_iter().for_each(f);
        return;
    }
    // Each task is taken out of its slot once, by the thread that claimed its index.
    let slots: Vec<Mutex<Option<T>>> = tasks.into_iter().map(|t| Mutex::new(Some(t))).collect();
    pool().run(slots.len(), &|index| {
        if let Some(task) = slots[index].lock().unwrap_or_else(|e| e.into_inner()).take() {
            f(task);
        }
    });
}

/// `here()` on the calling thread while a helper runs `there()`; both results. Where no helper
/// takes `there` (there is none, or the pool is busy with another job), the caller runs it after
/// `here`. For two pieces of work that only read what they share: a decode step's draw (the
/// sampler) and the log-probabilities' normaliser over the same logits.
pub fn alongside<A, B: Send>(here: impl FnOnce() -> A, there: impl FnOnce() -> B + Send) -> (A, B) {
    if pool().helpers.load(Ordering::Relaxed) == 0 {
        return (here(), there());
    }
    let there = Mutex::new(Some(there));
    let result = Mutex::new(None);
    let a = pool().run_after(
        1,
        &|_| {
            if let Some(there) = there.lock().unwrap_or_else(|e| e.into_inner()).take() {
                *result.lock().unwrap_or_else(|e| e.into_inner()) = Some(there());
            }
        },
        here,
    );
    let b = result.into_inner().unwrap_or_else(|e| e.into_inner()).expect("the task ran before `run` returned");
    (a, b)
}

/// Calls `f(index, chunk)` for each chunk of `chunk_len` items of `items` (the last may be
/// shorter), spread over the threads when `parallel`.
pub fn for_each_chunk<T: Send>(
    items: &mut [T],
    chunk_len: usize,
    parallel: bool,
    f: impl Fn(usize, &mut [T]) + Sync + Send,
) {
    let chunks = items.chunks_mut(chunk_len.max(1));
    if parallel {
        for_each_task(chunks.enumerate().collect(), |(index, chunk)| f(index, chunk));
    } else {
        chunks.enumerate().for_each(|(index, chunk)| f(index, chunk));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every task runs exactly once, whoever calls, however many at once (the native test
    /// harness calls from several threads; a task may start a job of its own).
    #[test]
    fn every_task_runs_once_under_concurrent_and_nested_callers() {
        let callers: Vec<_> = (0..4)
            .map(|caller| {
                std::thread::spawn(move || {
                    for round in 0..200 {
                        let tasks = 1 + (round * 7 + caller) % 23;
                        let counts: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
                        for_each_task((0..tasks).collect(), |i: usize| {
                            counts[i].fetch_add(1, Ordering::Relaxed);
                            if i == 0 {
                                let inner = AtomicUsize::new(0);
                                for_each_task((0..3).collect(), |_: usize| {
                                    inner.fetch_add(1, Ordering::Relaxed);
                                });
                                assert_eq!(inner.load(Ordering::Relaxed), 3);
                            }
                        });
                        assert!(
                            counts.iter().all(|c| c.load(Ordering::Relaxed) == 1),
                            "caller {caller}, round {round}"
                        );
                    }
                })
            })
            .collect();
        for caller in callers {
            caller.join().unwrap();
        }
    }

    /// Helpers beyond the count the work is split for take no task (the browser benches the
    /// helpers that measurably do not help), and take tasks again once counted back in.
    #[test]
    fn benched_helpers_take_no_task() {
        let pool = pool();
        let all = pool.helpers.load(Ordering::SeqCst);
        let ran_on = |pool: &Pool| {
            let threads = Mutex::new(std::collections::HashSet::new());
            for _ in 0..200 {
                pool.run(8, &|_| {
                    threads.lock().unwrap().insert(std::thread::current().id());
                    std::thread::sleep(std::time::Duration::from_micros(50));
                });
            }
            threads.into_inner().unwrap()
        };
        pool.set_helpers(0);
        let benched = ran_on(pool);
        pool.set_helpers(all);
        assert_eq!(benched.into_iter().collect::<Vec<_>>(), [std::thread::current().id()]);
        // Other tests' jobs may hold the pool meanwhile (then this caller runs its own tasks).
        if all > 0 {
            assert!((0..20).any(|_| ran_on(pool).len() > 1), "the helpers take tasks again");
        }
    }

    /// Jobs of few tasks after jobs of many, back to back, while helpers still finish claiming
    /// the last one: each task of each job runs once, and only that job's function runs it (a
    /// helper that read the next job's task count with the last job's epoch current once ran
    /// the last job's function, long returned, for a task index past its end).
    #[test]
    fn a_helper_late_on_one_job_never_takes_a_task_of_the_next() {
        for round in 0..20_000usize {
            let tasks = if round % 2 == 0 { 1 + round % 3 } else { 24 };
            let counts: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
            for_each_task((0..tasks).collect(), |i: usize| {
                counts[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 1), "round {round}");
        }
    }

    /// Both pieces of work run once, whoever calls and however busy the pool is, and each result
    /// comes back to its side (the native harness calls from several threads at once).
    #[test]
    fn alongside_runs_both_once_and_returns_both() {
        let callers: Vec<_> = (0..3)
            .map(|caller| {
                std::thread::spawn(move || {
                    for round in 0..500usize {
                        let (here, there) = (AtomicUsize::new(0), AtomicUsize::new(0));
                        let (a, b) = alongside(
                            || {
                                here.fetch_add(1, Ordering::Relaxed);
                                round * 2
                            },
                            || {
                                there.fetch_add(1, Ordering::Relaxed);
                                vec![round; 3]
                            },
                        );
                        assert_eq!((a, b), (round * 2, vec![round; 3]), "caller {caller}");
                        assert_eq!((here.into_inner(), there.into_inner()), (1, 1), "caller {caller}, round {round}");
                    }
                })
            })
            .collect();
        for caller in callers {
            caller.join().unwrap();
        }
    }

    /// A panic on the caller's side reaches the caller only once the other side, if it started
    /// (on a helper, borrowing what the caller lent), has finished; the pool goes on working. The
    /// harness's other tests hold the pool at times (then the caller runs both sides itself), so
    /// this tries until a helper has taken the other side a few times.
    #[test]
    fn a_panic_here_waits_for_there_and_leaves_the_pool_working() {
        let mut on_a_helper = 0;
        for _ in 0..200 {
            let (started, finished) = (AtomicUsize::new(0), AtomicUsize::new(0));
            let caller = std::thread::current().id();
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                alongside(
                    || {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        panic!("here")
                    },
                    || {
                        if std::thread::current().id() != caller {
                            started.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_millis(10));
                            finished.fetch_add(1, Ordering::SeqCst);
                        }
                    },
                )
            }));
            assert!(caught.is_err());
            assert_eq!(started.load(Ordering::SeqCst), finished.load(Ordering::SeqCst), "`there` ended first");
            assert_eq!(alongside(|| 1, || 2), (1, 2));
            on_a_helper += started.into_inner();
            if on_a_helper == 3 {
                return;
            }
        }
        // A machine of one core has no helper to take it.
        assert!(pool().helpers.load(Ordering::SeqCst) == 0 || on_a_helper > 0, "no helper took `there`");
    }

    #[test]
    fn chunks_cover_the_items_in_order() {
        let mut items: Vec<usize> = vec![0; 1000];
        for_each_chunk(&mut items, 64, true, |index, chunk| {
            for (offset, item) in chunk.iter_mut().enumerate() {
                *item = index * 64 + offset;
            }
        });
        assert!(items.iter().enumerate().all(|(i, &v)| i == v));
    }
}
