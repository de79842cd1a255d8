//! The thread and tiling policy of both fast paths: how work is cut into tasks for rayon's
//! threads, and how much of a score matrix one task holds.

use std::ops::Range;

/// Elements per task of an element-wise pass spread over the threads.
pub(crate) const PASS_CHUNK: usize = 1 << 15;

/// Rows a task of sequences should have at least, so that its products stay efficient.
const MIN_TASK_ROWS: usize = 512;

/// Bounds of the row blocks of a batch spread over the threads.
const MIN_BLOCK_ROWS: usize = 64;
const MAX_BLOCK_ROWS: usize = 512;

/// Below this many rows a batch spread over the threads splits its products by output
/// columns instead of rows: each weight is then read once, not once per row block.
const COLUMN_MODE_ROWS: usize = 1024;

/// Column tasks per thread of a product split by columns (spare tasks let idle threads
/// steal work), and the granularity of their widths (a multiple of the bf16 panel width).
const COLUMN_TASKS_PER_THREAD: usize = 4;
const COLUMN_ALIGN: usize = 64;

/// Packing tasks per thread of an operand packed on the threads, and the bounds of the lanes
/// (packed rows) one such task packs.
const PACK_TASKS_PER_THREAD: usize = 4;
const MIN_PACK_LANES: usize = 32;
const MAX_PACK_LANES: usize = 256;

/// Lanes one task reads per pair when packing an operand whose `k` values are strided (2 KiB of
/// each of two rows: long runs for the prefetcher), and the fewest pairs of `k` per such task.
const COLUMN_PACK_LANES: usize = 512;
const MIN_PACK_PAIRS: usize = 16;

/// Score elements one inference attention task holds (1 MiB of f32: in L2 cache).
pub(crate) const INFERENCE_SCORE_TILE: usize = 1 << 18;

/// Score elements one training attention task holds per buffer (256 KiB of f32; the
/// backward holds three).
pub(crate) const TRAINING_SCORE_TILE: usize = 1 << 16;

/// Columns per task of a scatter into a table (the embedding backward).
pub(crate) const SCATTER_COLUMNS: usize = 64;

/// Rows per partial sum of a column sum (the bias gradient): partial sums on the threads,
/// added in order, the same result on any thread count.
pub(crate) const SUM_ROWS: usize = 64;

/// Query rows per attention tile for sequences of `t` keys and tiles of `elements` scores.
pub(crate) fn query_tile(t: usize, elements: usize) -> usize {
    (elements / t.max(1)).clamp(1, t.max(1))
}

/// How many sequences one task runs through the whole stack: `b` (a single task, spread over
/// the threads step by step) unless the tasks of whole sequences come out as a multiple of
/// the threads, or many per thread.
pub(crate) fn sequences_per_task(b: usize, t: usize, threads: usize) -> usize {
    if threads <= 1 || b <= 1 {
        return b.max(1);
    }
    let group = MIN_TASK_ROWS
        .div_ceil(t.max(1))
        .clamp(1, b.div_ceil(threads));
    let tasks = b.div_ceil(group);
    if tasks.is_multiple_of(threads) || tasks >= 4 * threads {
        group
    } else {
        b
    }
}

/// `Some(threads)` when a step of `rows` rows on `threads` threads should split its products
/// by output columns, `None` when by row blocks.
pub(crate) fn column_mode(rows: usize, threads: usize) -> Option<usize> {
    (threads > 1 && rows < COLUMN_MODE_ROWS).then_some(threads)
}

/// Splits `rows` into consecutive blocks, one for a single thread, about one per thread
/// otherwise (within [`MIN_BLOCK_ROWS`]..=[`MAX_BLOCK_ROWS`] rows).
pub(crate) fn row_blocks(rows: usize, threads: usize) -> Vec<Range<usize>> {
    let len = if threads <= 1 {
        rows
    } else {
        rows.div_ceil(threads).clamp(MIN_BLOCK_ROWS, MAX_BLOCK_ROWS)
    }
    .max(1);
    (0..rows)
        .step_by(len)
        .map(|start| start..(start + len).min(rows))
        .collect()
}

/// The width of each column task of an `n`-column product split over `threads` threads
/// (about [`COLUMN_TASKS_PER_THREAD`] tasks per thread, widths a multiple of
/// [`COLUMN_ALIGN`]).
pub(crate) fn column_chunk(n: usize, threads: usize) -> usize {
    n.div_ceil(COLUMN_TASKS_PER_THREAD * threads)
        .next_multiple_of(COLUMN_ALIGN)
        .min(n)
        .max(1)
}

/// Panels of `width` lanes per task when `panels` panels are packed on `threads` threads:
/// about [`PACK_TASKS_PER_THREAD`] tasks per thread, each of [`MIN_PACK_LANES`] to
/// [`MAX_PACK_LANES`] lanes (at least one panel). Without the lower bound on the task count a
/// weight of 256 columns (8 panels of 32) or a 256-row operand (22 panels of 12) packed as
/// one task, or as one of 21 panels and one of 1, on a single thread while the others waited.
pub(crate) fn pack_group(panels: usize, width: usize, threads: usize) -> usize {
    let width = width.max(1);
    let most = (MAX_PACK_LANES / width).max(1);
    let least = MIN_PACK_LANES.div_ceil(width).min(most);
    panels
        .div_ceil(PACK_TASKS_PER_THREAD * threads.max(1))
        .clamp(least, most)
}

/// How packing an operand whose `k` values are strided (`count` lanes in `panels` panels of
/// `width`, `pairs` pairs of `k`) is cut on `threads` threads: (panels per task, pairs per
/// task). A task reads [`COLUMN_PACK_LANES`] consecutive lanes of two rows per pair (its panels
/// are written one run per panel), and the pairs are cut so that there are about
/// [`PACK_TASKS_PER_THREAD`] tasks per thread, each of at least [`MIN_PACK_PAIRS`] pairs.
pub(crate) fn column_pack_tasks(
    panels: usize,
    width: usize,
    pairs: usize,
    threads: usize,
) -> (usize, usize) {
    let group = (COLUMN_PACK_LANES / width.max(1)).clamp(1, panels.max(1));
    let cuts = (PACK_TASKS_PER_THREAD * threads.max(1)).div_ceil(panels.div_ceil(group).max(1));
    let span = pairs.div_ceil(cuts).max(MIN_PACK_PAIRS).min(pairs.max(1));
    (group, span)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_packing_tasks_read_long_runs_and_feed_every_thread() {
        // A 256-column weight in panels of 32 on 2 threads: one group of all 8 panels (1 KiB of
        // each row a pair), the 512 pairs cut in 8.
        assert_eq!(column_pack_tasks(8, 32, 512, 2), (8, 64));
        // 1000 lanes in panels of 12: groups of 42 panels (504 lanes), 2 of them.
        assert_eq!(column_pack_tasks(84, 12, 129, 2), (42, 33));
        // Few pairs: at least MIN_PACK_PAIRS a task, never more than there are.
        assert_eq!(column_pack_tasks(8, 32, 20, 2), (8, 16));
        assert_eq!(column_pack_tasks(8, 32, 3, 2), (8, 3));
        // One thread, a panel wider than the run: one panel a group, 3 groups, so the pairs in
        // 2 for at least 4 tasks.
        assert_eq!(column_pack_tasks(3, 1024, 400, 1), (1, 200));
    }
}
