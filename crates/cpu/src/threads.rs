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
//! caller's). In the browser's threaded build `std::thread::spawn` does not exist: they are long
//! tasks on rayon's pool of Web Workers, which `wasm-bindgen-rayon` starts (`initThreadPool`,
//! one worker per core but the engine's own). The plain wasm build has no helper: everything runs
//! on the calling thread.
//!
//! **The protocol.** A job is `tasks` calls of one `Fn(usize)`. Its epoch and the next task index
//! share one 64-bit atomic, so a helper claims task `i` of epoch `e` only while `e` is current: a
//! helper that saw an old epoch can never run a new job's task with an old job's function. The
//! caller returns only when every claimed task has finished, so the function it lent outlives
//! every call. One job at a time: a second caller (another thread of a native test, a product
//! inside a task) runs its tasks itself.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

/// Polls of the job counter a helper makes before it parks: about a millisecond.
const SPIN_POLLS: u32 = 1 << 18;

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
    helpers: usize,
}

/// The pool, its helpers started on first use.
fn pool() -> &'static Pool {
    static POOL: OnceLock<&'static Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let helpers = helper_count();
        let pool: &'static Pool = Box::leak(Box::new(Pool {
            counter: AtomicU64::new(0),
            tasks: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            job: Mutex::new(None),
            running: Mutex::new(()),
            parked: AtomicU32::new(0),
            park: Mutex::new(()),
            wake: Condvar::new(),
            helpers,
        }));
        for _ in 0..helpers {
            spawn(move || pool.help());
        }
        pool
    })
}

/// Threads besides the caller's.
fn helper_count() -> usize {
    #[cfg(not(target_family = "wasm"))]
    {
        std::env::var("NUCLEUS_THREADS")
            .ok()
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1)
            - 1
    }
    #[cfg(all(target_family = "wasm", target_feature = "atomics"))]
    {
        rayon::current_num_threads()
    }
    #[cfg(all(target_family = "wasm", not(target_feature = "atomics")))]
    {
        0
    }
}

fn spawn(helper: impl FnOnce() + Send + 'static) {
    #[cfg(not(target_family = "wasm"))]
    {
        std::thread::Builder::new().name("nucleus-cpu".into()).spawn(helper).expect("spawn a CPU engine thread");
    }
    #[cfg(all(target_family = "wasm", target_feature = "atomics"))]
    {
        rayon::spawn(helper);
    }
    #[cfg(all(target_family = "wasm", not(target_feature = "atomics")))]
    {
        let _ = helper;
        unreachable!("the plain wasm build has no helpers");
    }
}

impl Pool {
    /// A helper's life: wait for a job, take its tasks until none is left, again.
    fn help(&self) {
        let mut seen = self.epoch();
        loop {
            let epoch = self.wait_for_job(seen);
            seen = epoch;
            let Some(job) = *self.job.lock().unwrap_or_else(|e| e.into_inner()) else { continue };
            while let Some(index) = self.claim(epoch) {
                job(index);
                self.done.fetch_add(1, Ordering::Release);
            }
        }
    }

    fn epoch(&self) -> u32 {
        (self.counter.load(Ordering::Acquire) >> 32) as u32
    }

    /// Spins, then parks, until the epoch is not `seen`; returns the new one.
    fn wait_for_job(&self, seen: u32) -> u32 {
        for _ in 0..SPIN_POLLS {
            let epoch = self.epoch();
            if epoch != seen {
                return epoch;
            }
            std::hint::spin_loop();
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
        let Ok(_running) = self.running.try_lock() else {
            // Another job holds the pool (or this is a task of one): this caller's tasks are its own.
            (0..tasks).for_each(task);
            return;
        };
        // SAFETY: the lifetime is erased for as long as the job is current; this function returns
        // only after every task it lent out has finished (`done == tasks` below), and a helper
        // calls the function only for a task it claimed in this job's epoch.
        let lent: Task<'static> = unsafe { std::mem::transmute::<Task<'_>, Task<'static>>(task) };
        *self.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(lent);
        self.tasks.store(tasks, Ordering::Release);
        self.done.store(0, Ordering::Release);
        let epoch = self.epoch().wrapping_add(1);
        self.counter.store(u64::from(epoch) << 32, Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) > 0 {
            let _guard = self.park.lock().unwrap_or_else(|e| e.into_inner());
            self.wake.notify_all();
        }
        let mut mine = 0;
        while let Some(index) = self.claim(epoch) {
            task(index);
            mine += 1;
        }
        while self.done.load(Ordering::Acquire) + mine < tasks {
            std::hint::spin_loop();
        }
        *self.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// Threads the kernels spread their work over: the caller's and the pool's helpers.
pub fn threads() -> usize {
    pool().helpers + 1
}

/// Calls `f` on each task, spread over the threads (the caller's included).
pub fn for_each_task<T: Send>(tasks: Vec<T>, f: impl Fn(T) + Sync + Send) {
    if tasks.len() <= 1 || pool().helpers == 0 {
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
