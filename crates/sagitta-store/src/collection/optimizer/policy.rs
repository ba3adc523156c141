//! The optimizer's policy, pure: from the list of immutable parts (sizes,
//! live rows, built or not) and a few knobs, the next task ([`plan`]),
//! whether it waits for writes to pause ([`defer`]), how long "paused"
//! is ([`eager_quiet_ms`]) and how often the flush thread looks
//! ([`flush_tick`]). No I/O, no threads, no clock: the loops in
//! `threads.rs` gather the inputs and run what this decides.

use std::time::Duration;

/// Builds and merges wait until writes have paused this long...
pub(crate) const DEFER_MS: u64 = 300;
/// ...unless this many full parts of rows are waiting for their index (or
/// someone waits in `optimize()`): a bulk load runs at the Flat rate on
/// every core and its index is built right after, while sustained ingest
/// still gets indexed as it goes.
const BACKLOG_PARTS: u64 = 4;
/// ...or the collection has more segments than this (each one costs every
/// search a walk): under writes that never pause, merges still run.
const MAX_DEFERRED_SEGMENTS: usize = 16;
/// Once writes have paused long enough, small segments merge into the
/// largest whatever their sizes (the [`GROWTH`] rule is for writes that
/// keep coming): a bulk load ends as one segment, not a large one and its
/// tail, each searched by every query. Long enough is at least this...
const EAGER_QUIET_MS: u64 = 5_000;
/// ...and the time to rewrite the largest segment at this rate, so that
/// writes arriving just slower than the threshold rewrite it at most at
/// this many bytes a second.
const EAGER_REWRITE_BYTES_PER_S: u64 = 16 << 20;

/// Most bytes of Flat segments one build task indexes (the rows it
/// inserts; the base graph it imports may be far larger): each task ends,
/// and its rows become searchable by graph, within minutes, whatever
/// `max_segment_size` allows a segment to grow to. With a 16 GiB ceiling
/// and no such cap, a 5M-row bulk load was one task of 4.5M inserts that
/// had not finished after 83 minutes on 2 cores, every search meanwhile
/// scanning those rows exactly.
const MAX_BUILD_BYTES: u64 = 1 << 30;

/// One immutable segment as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PartInfo {
    pub id: u64,
    /// Slots (live and dead rows).
    pub slots: u64,
    /// Live rows.
    pub live: u64,
    /// In the collection's final index kind, or settled without a graph
    /// (`flat`).
    pub built: bool,
    /// A Flat segment small enough to stay so (searched by exact scan; see
    /// `CollectionConfig::index_threshold`): no graph to import.
    pub flat: bool,
}

/// The policy's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Policy {
    pub bytes_per_vector: u64,
    pub max_segment_size: u64,
    /// Built segments can take new rows into their graph (HNSW).
    pub graph_import: bool,
    /// Rewrite a built segment once this fraction of its slots is dead
    /// (0: any dead row).
    pub dead_ratio: f64,
    /// A segment written with fewer live rows is written Flat (no graph).
    pub index_threshold: u64,
    /// Merge small segments into the largest whatever their sizes (writes
    /// have paused, or `optimize()`), not only when they grow it by
    /// 1 / [`GROWTH`].
    pub eager: bool,
}

/// What a task does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskKind {
    /// Index Flat segments (into a built one with room, when `base`).
    Build,
    /// Merge small built segments.
    Merge,
    /// Rewrite a segment without its dead rows.
    Compact,
}

impl TaskKind {
    /// The task's name in stats and errors.
    pub(crate) fn name(self) -> &'static str {
        match self {
            TaskKind::Build => "build",
            TaskKind::Merge => "merge",
            TaskKind::Compact => "compact",
        }
    }
}

/// A task: rewrite `inputs` as one new segment; with `base`, that input's
/// graph is imported and only the other inputs' rows are inserted.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    pub kind: TaskKind,
    pub inputs: Vec<u64>,
    pub base: Option<u64>,
    /// Write the result as a Flat segment (fewer live rows than the
    /// policy's `index_threshold`); never with a `base`.
    pub flat: bool,
}

impl PartInfo {
    /// Dead rows (slots not live).
    fn dead(&self) -> u64 {
        self.slots.saturating_sub(self.live)
    }
}

/// A segment takes new rows into its graph (or merges with smaller ones)
/// only when they bring at least 1 / `GROWTH` of its size: each rewrite
/// of a segment at least grows it by that factor, so a row is rewritten
/// O(log) times however the rows trickle in (a write a second does not
/// rewrite a 1 GiB segment every second).
const GROWTH: u64 = 8;

/// The next task for `parts` (oldest first), or `None` when settled:
/// 1. a built segment whose dead share reaches `dead_ratio` is rewritten;
/// 2. unbuilt (Flat) segments, oldest first and up to `max_segment_size`
///    (at most [`MAX_BUILD_BYTES`]) together, are built: into the largest
///    built segment they fit in
///    and bring at least 1 / [`GROWTH`] of, when graphs can be imported
///    (so only their rows are linked), else as a new segment;
/// 3. built segments under half of `max_segment_size` are merged: the
///    longest run of them, smallest first, that fits and whose smaller
///    members bring at least 1 / [`GROWTH`] of the largest, into that
///    largest one.
///
/// With `eager`, the two [`GROWTH`] conditions are dropped and rule 3
/// takes any segment under `max_segment_size`.
///
/// Each task removes dead rows or unbuilt segments or lowers the segment
/// count, so repeated planning ends.
pub(crate) fn plan(parts: &[PartInfo], p: &Policy) -> Option<Plan> {
    let bytes = |rows: u64| rows.saturating_mul(p.bytes_per_vector);
    let too_dead =
        |x: &PartInfo| x.dead() > 0 && x.dead() as f64 >= p.dead_ratio * x.slots.max(1) as f64;
    if let Some(x) = parts.iter().find(|x| x.built && too_dead(x)) {
        return Some(Plan {
            kind: TaskKind::Compact,
            inputs: vec![x.id],
            base: None,
            flat: x.flat,
        });
    }
    let unbuilt: Vec<&PartInfo> = parts.iter().filter(|x| !x.built).collect();
    if !unbuilt.is_empty() {
        let mut inputs = Vec::new();
        let mut total = 0u64;
        for x in unbuilt {
            if !inputs.is_empty() && bytes(total + x.live) > p.max_segment_size.min(MAX_BUILD_BYTES)
            {
                break;
            }
            inputs.push(x.id);
            total += x.live;
        }
        let base = p
            .graph_import
            .then(|| {
                parts
                    .iter()
                    .filter(|x| {
                        x.built
                            && !x.flat
                            && x.live > 0
                            && bytes(x.slots + total) <= p.max_segment_size
                            && (p.eager || total * GROWTH >= x.slots)
                    })
                    .max_by_key(|x| (x.slots, x.id))
            })
            .flatten();
        if let Some(b) = base {
            inputs.insert(0, b.id);
        }
        return Some(Plan {
            kind: TaskKind::Build,
            inputs,
            base: base.map(|b| b.id),
            flat: false,
        });
    }
    // Eager: any segment with room may take the others.
    let small_below = if p.eager {
        p.max_segment_size
    } else {
        p.max_segment_size / 2
    };
    let mut small: Vec<&PartInfo> = parts
        .iter()
        .filter(|x| bytes(x.live) < small_below)
        .collect();
    small.sort_by_key(|x| (x.slots, x.id));
    let mut run = 0;
    let mut total = 0u64;
    for (i, x) in small.iter().enumerate() {
        if bytes(total + x.slots) > p.max_segment_size {
            break;
        }
        if i >= 1 && (p.eager || total * GROWTH >= x.slots) {
            run = i + 1;
        }
        total += x.slots;
    }
    if run < 2 {
        return None;
    }
    let chosen = &small[..run];
    let flat = chosen.iter().map(|x| x.live).sum::<u64>() < p.index_threshold;
    let base = (p.graph_import && !flat)
        .then(|| {
            chosen
                .iter()
                .filter(|x| !x.flat)
                .max_by_key(|x| (x.slots, x.id))
                .map(|x| x.id)
        })
        .flatten();
    let mut inputs: Vec<u64> = chosen.iter().map(|x| x.id).collect();
    inputs.sort_unstable();
    Some(Plan {
        kind: TaskKind::Merge,
        inputs,
        base,
        flat,
    })
}

/// Whether a task of `kind`, planned while nobody waits for it, is put
/// off until writes pause: builds and merges wait [`DEFER_MS`] after the
/// last write, unless [`BACKLOG_PARTS`] parts of rows (`rows_per_part`
/// each) wait for their index or the collection has more than
/// [`MAX_DEFERRED_SEGMENTS`] segments. Compactions never wait.
pub(crate) fn defer(
    kind: TaskKind,
    quiet_ms: u64,
    backlog_rows: u64,
    rows_per_part: u64,
    segments: usize,
) -> bool {
    kind != TaskKind::Compact
        && quiet_ms < DEFER_MS
        && backlog_rows < BACKLOG_PARTS * rows_per_part
        && segments <= MAX_DEFERRED_SEGMENTS
}

/// How often the flush thread looks for an idle mutable part to seal:
/// twice per `idle_seal_ms` (within 10 ms..=1 s), every second when idle
/// sealing is off (0).
pub(crate) fn flush_tick(idle_seal_ms: u64) -> Duration {
    Duration::from_millis(if idle_seal_ms > 0 {
        (idle_seal_ms / 2).clamp(10, 1000)
    } else {
        1000
    })
}

/// How long writes must have paused before an eager merge: the
/// [`EAGER_QUIET_MS`] floor, or the time to rewrite the largest segment at
/// [`EAGER_REWRITE_BYTES_PER_S`].
pub(crate) fn eager_quiet_ms(parts: &[PartInfo], bytes_per_vector: u64) -> u64 {
    let largest = parts.iter().map(|x| x.slots).max().unwrap_or(0);
    let rewrite = largest
        .saturating_mul(bytes_per_vector)
        .saturating_mul(1000)
        / EAGER_REWRITE_BYTES_PER_S;
    rewrite.max(EAGER_QUIET_MS)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn part(id: u64, slots: u64, live: u64, built: bool) -> PartInfo {
        PartInfo {
            id,
            slots,
            live,
            built,
            flat: false,
        }
    }

    /// A Flat segment settled without a graph.
    fn flat(id: u64, rows: u64) -> PartInfo {
        PartInfo {
            built: true,
            flat: true,
            ..part(id, rows, rows, true)
        }
    }

    fn pol() -> Policy {
        Policy {
            bytes_per_vector: 1,
            max_segment_size: 1000,
            graph_import: true,
            dead_ratio: 0.2,
            index_threshold: 0,
            eager: false,
        }
    }

    #[test]
    fn small_segments_stay_flat_and_merge_into_flat_or_built_ones() {
        let p = Policy {
            index_threshold: 100,
            ..pol()
        };
        // Settled flat segments alone: nothing to build.
        assert_eq!(plan(&[flat(1, 60)], &p), None);
        // Two of them merge, into a Flat segment while under the threshold...
        let m = plan(&[flat(1, 30), flat(2, 40)], &p).unwrap();
        assert_eq!((m.kind, m.flat, m.base), (TaskKind::Merge, true, None));
        // ...and into an indexed one past it, built from scratch (a flat
        // segment has no graph to import).
        let m = plan(&[flat(1, 60), flat(2, 70)], &p).unwrap();
        assert_eq!((m.kind, m.flat, m.base), (TaskKind::Merge, false, None));
        // With a built segment, its graph is the base.
        let m = plan(&[part(1, 300, 300, true), flat(2, 60)], &p).unwrap();
        assert_eq!((m.flat, m.base), (false, Some(1)));
        // Unbuilt segments are never imported into a flat one.
        let b = plan(&[flat(1, 90), part(2, 200, 200, false)], &p).unwrap();
        assert_eq!((b.kind, b.base, b.flat), (TaskKind::Build, None, false));
        // A flat segment with dead rows is rewritten flat.
        let dead = PartInfo {
            live: 40,
            ..flat(1, 60)
        };
        let c = plan(&[dead], &p).unwrap();
        assert_eq!((c.kind, c.flat), (TaskKind::Compact, true));
    }

    #[test]
    fn settled_when_nothing_to_do() {
        assert_eq!(plan(&[], &pol()), None);
        assert_eq!(plan(&[part(1, 900, 900, true)], &pol()), None);
        // two big ones that do not fit together
        assert_eq!(
            plan(&[part(1, 600, 600, true), part(2, 600, 600, true)], &pol()),
            None
        );
    }

    #[test]
    fn unbuilt_goes_into_the_largest_built_segment_with_room() {
        let parts = [
            part(1, 300, 300, true),
            part(2, 500, 500, true),
            part(3, 100, 100, false),
        ];
        let p = plan(&parts, &pol()).unwrap();
        assert_eq!(p.kind, TaskKind::Build);
        assert_eq!(p.base, Some(2));
        assert_eq!(p.inputs, vec![2, 3]);
        // no room anywhere: built alone
        let parts = [part(1, 950, 950, true), part(3, 100, 100, false)];
        let p = plan(&parts, &pol()).unwrap();
        assert_eq!((p.base, p.inputs.clone()), (None, vec![3]));
        // without graph import (IVF): built alone
        let p = plan(
            &parts,
            &Policy {
                graph_import: false,
                ..pol()
            },
        )
        .unwrap();
        assert_eq!((p.base, p.inputs), (None, vec![3]));
    }

    #[test]
    fn unbuilt_segments_batch_up_to_the_maximum() {
        let parts = [
            part(1, 400, 400, false),
            part(2, 400, 390, false),
            part(3, 400, 400, false),
        ];
        let p = plan(&parts, &pol()).unwrap();
        assert_eq!(
            (p.kind, p.base, p.inputs),
            (TaskKind::Build, None, vec![1, 2])
        );
        // one larger than the maximum still gets built
        let p = plan(&[part(1, 5000, 5000, false)], &pol()).unwrap();
        assert_eq!(p.inputs, vec![1]);
    }

    #[test]
    fn one_build_indexes_at_most_a_gibibyte_of_rows_into_a_larger_base() {
        // Rows of 1 MiB, a 16 GiB ceiling: eight Flat segments of 512 rows
        // (512 MiB each) are built two at a time, each time into the
        // largest built segment (4 GiB here), which may keep growing.
        let p = Policy {
            bytes_per_vector: 1 << 20,
            max_segment_size: 16 << 30,
            ..pol()
        };
        let mut parts = vec![part(1, 4096, 4096, true)];
        parts.extend((2..10).map(|id| part(id, 512, 512, false)));
        let b = plan(&parts, &p).unwrap();
        assert_eq!(
            (b.kind, b.base, b.inputs),
            (TaskKind::Build, Some(1), vec![1, 2, 3])
        );
        // One segment larger than the cap is still built, alone.
        let big = [part(1, 2048, 2048, false), part(2, 10, 10, false)];
        assert_eq!(plan(&big, &p).unwrap().inputs, vec![1]);
    }

    #[test]
    fn dead_rows_past_the_ratio_are_compacted_first() {
        let parts = [part(1, 100, 70, true), part(2, 100, 100, false)];
        let p = plan(&parts, &pol()).unwrap();
        assert_eq!((p.kind, p.inputs), (TaskKind::Compact, vec![1]));
        let parts = [part(1, 100, 90, true)];
        assert_eq!(plan(&parts, &pol()), None);
        let forced = Policy {
            dead_ratio: 0.0,
            ..pol()
        };
        assert_eq!(plan(&parts, &forced).unwrap().kind, TaskKind::Compact);
        // a compacted segment is not compacted again
        assert_eq!(plan(&[part(1, 90, 90, true)], &forced), None);
    }

    #[test]
    fn eager_merges_a_small_tail_into_the_largest_segment() {
        // A bulk load's large segment and its small tail: too small to
        // merge while writes go on...
        let parts = [part(1, 900, 900, true), part(2, 30, 30, true)];
        assert_eq!(plan(&parts, &pol()), None);
        // ...merged into it (its graph imported) once they pause.
        let eager = Policy {
            eager: true,
            ..pol()
        };
        let m = plan(&parts, &eager).unwrap();
        assert_eq!(
            (m.kind, m.base, m.inputs),
            (TaskKind::Merge, Some(1), vec![1, 2])
        );
        // An unbuilt tail is built into it directly.
        let parts = [part(1, 900, 900, true), part(2, 30, 30, false)];
        let b = plan(&parts, &pol()).unwrap();
        assert_eq!((b.base, b.inputs), (None, vec![2]));
        let b = plan(&parts, &eager).unwrap();
        assert_eq!(
            (b.kind, b.base, b.inputs),
            (TaskKind::Build, Some(1), vec![1, 2])
        );
        // Never past the maximum.
        assert_eq!(
            plan(&[part(1, 990, 990, true), part(2, 30, 30, true)], &eager),
            None
        );
        // A settled single segment stays as it is.
        assert_eq!(plan(&[part(1, 900, 900, true)], &eager), None);
    }

    #[test]
    fn eager_quiet_time_grows_with_the_largest_segment() {
        assert_eq!(eager_quiet_ms(&[], 2048), EAGER_QUIET_MS);
        assert_eq!(
            eager_quiet_ms(&[part(1, 100, 100, true)], 2048),
            EAGER_QUIET_MS
        );
        // 1 GiB to rewrite at 16 MiB/s: 64 s.
        let big = part(1, 1 << 20, 1 << 20, true);
        assert_eq!(eager_quiet_ms(&[big, part(2, 10, 10, true)], 1024), 64_000);
    }

    #[test]
    fn small_segments_merge_into_the_largest() {
        let parts = [
            part(1, 100, 100, true),
            part(2, 700, 700, true),
            part(3, 200, 200, true),
            part(4, 50, 50, true),
        ];
        let p = plan(&parts, &pol()).unwrap();
        assert_eq!(p.kind, TaskKind::Merge);
        assert_eq!(p.inputs, vec![1, 3, 4]);
        assert_eq!(p.base, Some(3));
    }

    #[test]
    fn trickled_rows_do_not_rewrite_a_big_segment_each_time() {
        // One row flushed at a time next to a big built segment: built as
        // a segment of its own, then small ones merge among themselves, and
        // only a run of 1/8 of the big one's size goes into it.
        let big = part(1, 400, 400, true);
        let p = plan(&[big, part(2, 1, 1, false)], &pol()).unwrap();
        assert_eq!((p.base, p.inputs), (None, vec![2]));
        let p = plan(&[big, part(2, 1, 1, true), part(3, 1, 1, true)], &pol()).unwrap();
        assert_eq!((p.kind, p.inputs), (TaskKind::Merge, vec![2, 3]));
        assert_eq!(plan(&[big, part(2, 40, 40, true)], &pol()), None);
        let p = plan(&[big, part(2, 50, 50, true)], &pol()).unwrap();
        assert_eq!((p.base, p.inputs), (Some(1), vec![1, 2]));
        // Simulated trickle: every row is rewritten a bounded number of
        // times (here 1000 rows one at a time).
        let mut parts = vec![big];
        let (mut next, mut rewritten) = (10u64, 0u64);
        for _ in 0..1000 {
            parts.push(part(next, 1, 1, false));
            next += 1;
            while let Some(pl) = plan(&parts, &pol()) {
                let rows: u64 = parts
                    .iter()
                    .filter(|x| pl.inputs.contains(&x.id))
                    .map(|x| x.live)
                    .sum();
                rewritten += rows;
                parts.retain(|x| !pl.inputs.contains(&x.id));
                parts.push(part(next, rows, rows, true));
                next += 1;
            }
        }
        assert!(
            rewritten < 1400 * 12,
            "{rewritten} row rewrites for 1400 rows"
        );
        assert!(parts.len() <= 12, "{parts:?}");
    }

    #[test]
    fn repeated_planning_terminates() {
        for eager in [false, true] {
            planning_terminates(Policy { eager, ..pol() });
        }
    }

    fn planning_terminates(pol: Policy) {
        let pol = || pol;
        // Simulate: apply each plan, then plan again.
        let mut parts: Vec<PartInfo> = (1..=40)
            .map(|i| part(i, 37 + i % 5, 37 + i % 5, i % 3 != 0))
            .collect();
        parts.push(part(41, 100, 10, true));
        for next_id in 100..300 {
            let Some(p) = plan(&parts, &pol()) else {
                break;
            };
            let live: u64 = parts
                .iter()
                .filter(|x| p.inputs.contains(&x.id))
                .map(|x| x.live)
                .sum();
            parts.retain(|x| !p.inputs.contains(&x.id));
            parts.push(part(next_id, live, live, true));
        }
        assert_eq!(plan(&parts, &pol()), None, "{parts:?}");
        assert!(parts.iter().all(|x| x.built && x.slots == x.live));
        let total: u64 = parts.iter().map(|x| x.live).sum();
        assert!(parts.len() as u64 <= total / 500 + 2, "{parts:?}");
        if pol().eager {
            // Eager: no two segments that fit in one are left apart.
            let mut sizes: Vec<u64> = parts.iter().map(|x| x.slots).collect();
            sizes.sort_unstable();
            let max = pol().max_segment_size;
            assert!(sizes.len() < 2 || sizes[0] + sizes[1] > max, "{parts:?}");
        }
    }
    #[test]
    fn builds_and_merges_wait_for_writes_to_pause_unless_backlogged() {
        assert!(defer(TaskKind::Build, 0, 0, 100, 1));
        assert!(defer(TaskKind::Merge, DEFER_MS - 1, 399, 100, 16));
        assert!(!defer(TaskKind::Compact, 0, 0, 100, 1));
        assert!(!defer(TaskKind::Build, DEFER_MS, 0, 100, 1));
        assert!(!defer(TaskKind::Build, 0, 400, 100, 1));
        assert!(!defer(TaskKind::Merge, 0, 0, 100, 17));
        assert_eq!(flush_tick(0), Duration::from_secs(1));
        assert_eq!(flush_tick(5), Duration::from_millis(10));
        assert_eq!(flush_tick(600), Duration::from_millis(300));
        assert_eq!(flush_tick(60_000), Duration::from_secs(1));
    }
}
