//! 128-bit keys (`key_bits = 128`, id type uint128) through the store:
//! ids written and read back exactly (above 2^64 and at 2^128 - 1), lookups
//! by id that never answer for another id with the same 64-bit key, a
//! colliding id refused, add / add-once / upsert / remove by id, and the
//! ids kept across the WAL replay of an unsealed tail, sealed segments,
//! a rebuilt bloom filter and tombstones.

#![allow(clippy::unwrap_used)]

use sagitta_index::{DType, Metric, Space, VectorRef};
use sagitta_store::{
    u128_key, Collection, CollectionConfig, CollectionSearch, Id, IdColumn, IdType, IdWrite,
    OpenMode, StoreError,
};

const DIMS: usize = 4;

fn vector(i: u64) -> Vec<f32> {
    (0..DIMS).map(|d| (i * 7 + d as u64) as f32).collect()
}

fn config() -> CollectionConfig {
    let mut c =
        CollectionConfig::new(Space::new(DIMS, Metric::L2, DType::F32).unwrap()).with_key_bits(128);
    c.segment_size = 30 * c.bytes_per_vector();
    c
}

/// The id of row `i`: above 2^64 for most rows, the extremes included.
fn id(i: u64) -> u128 {
    match i {
        0 => 0,
        1 => u128::MAX,
        _ => (u128::from(i) << 64) | u128::from(i.wrapping_mul(0x9e37_79b9)),
    }
}

fn write(
    c: &Collection,
    rows: std::ops::Range<u64>,
    mode: IdWrite,
) -> Result<Vec<u64>, StoreError> {
    let vecs: Vec<Vec<f32>> = rows.clone().map(vector).collect();
    let refs: Vec<VectorRef<'_>> = vecs.iter().map(|v| VectorRef::F32(v)).collect();
    c.write_ids(&IdColumn::U128(rows.map(id).collect()), &refs, None, mode)
}

fn ids(rows: impl Iterator<Item = u64>) -> Vec<Id> {
    rows.map(|i| Id::U128(id(i))).collect()
}

/// Another id with the key of `v` (same key, different high bits).
fn collider(v: u128) -> u128 {
    let hi = (v >> 64) as u64 ^ 0x5555;
    let want = u128_key(v);
    let lo = want ^ u128_key(u128::from(hi) << 64);
    (u128::from(hi) << 64) | u128::from(lo)
}

#[test]
fn ids_round_trip_and_lookups_check_the_stored_id() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(&dir.path().join("c"), config()).unwrap();
    assert_eq!(c.id_type(), IdType::UInt128);
    assert_eq!(c.config().key_bits, 128);
    let keys = write(&c, 0..50, IdWrite::Upsert).unwrap();
    let back = c.ids_of(&keys).unwrap();
    assert_eq!(back, ids(0..50).into_iter().map(Some).collect::<Vec<_>>());

    // A different id with the same key: refused on write, and never
    // answered for by lookups.
    let other = collider(id(7));
    assert_eq!(u128_key(other), keys[7]);
    assert_ne!(other, id(7));
    let v = vector(7);
    let e = c
        .upsert_ids(&IdColumn::U128(vec![other]), &[VectorRef::F32(&v)], None)
        .unwrap_err();
    assert!(
        matches!(e, StoreError::IdCollision { key, .. } if key == keys[7]),
        "{e}"
    );
    assert!(c.contains(keys[7]));
    let live = c
        .live_keys(&[Id::U128(id(7)), Id::U128(other), Id::U128(id(99))])
        .unwrap();
    assert_eq!(live, [Some(keys[7]), None, None]);
    // Text forms of the same id find it.
    let text = Id::Str(Id::U128(id(3)).to_string());
    assert_eq!(c.live_keys(&[text]).unwrap(), [Some(keys[3])]);
    assert!(matches!(
        c.live_keys(&[Id::Str("not an id".into())]),
        Err(StoreError::InvalidId { .. })
    ));

    // add refuses a present id; add-once skips it; nothing half-written.
    let e = write(&c, 48..52, IdWrite::Add).unwrap_err();
    assert!(matches!(e, StoreError::DuplicateId { row: 0, .. }), "{e}");
    assert_eq!(c.len(), 50);
    assert_eq!(write(&c, 48..52, IdWrite::AddOnce).unwrap().len(), 2);
    assert_eq!(c.len(), 52);

    // Search results carry the ids back.
    let q = vector(20);
    let hits = c
        .search(&[VectorRef::F32(&q)], 3, &CollectionSearch::default())
        .unwrap();
    let hit_keys: Vec<u64> = hits[0].iter().map(|n| n.key).collect();
    assert_eq!(c.ids_of(&hit_keys).unwrap()[0], Some(Id::U128(id(20))));
}

#[test]
fn ids_survive_replay_sealing_bloom_rebuild_and_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let c = Collection::create(&path, config()).unwrap();
    write(&c, 0..100, IdWrite::Upsert).unwrap();
    c.seal().unwrap();
    c.optimize().unwrap();
    // An unsealed tail, and deletes of sealed and tail rows, by id.
    write(&c, 100..110, IdWrite::Upsert).unwrap();
    let gone = ids([5u64, 1, 105].into_iter());
    let keys: Vec<u64> = c
        .live_keys(&gone)
        .unwrap()
        .into_iter()
        .map(Option::unwrap)
        .collect();
    assert_eq!(c.remove(&keys).unwrap(), 3);
    drop(c);

    // Reopen: the tail replays from the WAL with its ids.
    let c = Collection::open(&path, OpenMode::ReadWrite).unwrap();
    assert_eq!(c.len(), 107);
    let all = ids(0..110);
    let live = c.live_keys(&all).unwrap();
    for (i, l) in live.iter().enumerate() {
        assert_eq!(l.is_some(), ![1, 5, 105].contains(&i), "row {i}");
    }
    c.rebuild_bloom();
    let keys: Vec<u64> = live.iter().flatten().copied().collect();
    let back: Vec<Id> = c
        .ids_of(&keys)
        .unwrap()
        .into_iter()
        .map(Option::unwrap)
        .collect();
    let want: Vec<Id> = all
        .iter()
        .enumerate()
        .filter(|(i, _)| ![1, 5, 105].contains(i))
        .map(|(_, id)| id.clone())
        .collect();
    assert_eq!(back, want);
    c.close().unwrap();

    // Read-only, everything sealed.
    let c = Collection::open(&path, OpenMode::ReadOnly).unwrap();
    assert_eq!(c.id_type(), IdType::UInt128);
    assert_eq!(
        c.live_keys(&[Id::U128(u128::MAX), Id::U128(id(0)), Id::U128(id(109))])
            .unwrap()
            .iter()
            .map(Option::is_some)
            .collect::<Vec<_>>(),
        [false, true, true]
    );
}

#[test]
fn key_bits_and_id_type_must_agree() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.id_type = IdType::UInt64;
    let e = Collection::create(&dir.path().join("a"), cfg).unwrap_err();
    assert!(matches!(e, StoreError::Config(_)), "{e}");
    let mut cfg = config();
    cfg.key_bits = 96;
    assert!(Collection::create(&dir.path().join("b"), cfg).is_err());
    // 64-bit collections refuse ids above 2^64 - 1 with a typed error.
    let c = Collection::create(
        &dir.path().join("c"),
        CollectionConfig::new(Space::new(DIMS, Metric::L2, DType::F32).unwrap()),
    )
    .unwrap();
    let v = vector(1);
    let e = c
        .upsert_ids(&IdColumn::U128(vec![1 << 64]), &[VectorRef::F32(&v)], None)
        .unwrap_err();
    assert!(matches!(e, StoreError::InvalidId { row: 0, .. }), "{e}");
}

/// Lookups that mix ids never written with live, deleted and colliding
/// ids, over sealed segments and the mutable part, answer each in its place
/// (the bloom filter drops most absent ids before any part is searched).
#[test]
fn lookups_mixing_absent_and_live_ids_answer_each_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(&dir.path().join("c"), config()).unwrap();
    let mut keys = write(&c, 0..90, IdWrite::Upsert).unwrap();
    c.seal().unwrap();
    keys.extend(write(&c, 90..100, IdWrite::Upsert).unwrap());
    c.remove(&[keys[40]]).unwrap();
    let mut ask = Vec::new();
    let mut want = Vec::new();
    for i in (0..100).step_by(10) {
        ask.push(Id::U128(id(1_000 + i)));
        want.push(None);
        ask.push(Id::U128(id(i)));
        want.push((i != 40).then(|| keys[i as usize]));
        ask.push(Id::U128(collider(id(i + 1))));
        want.push(None);
    }
    assert_eq!(c.live_keys(&ask).unwrap(), want);
    assert_eq!(c.live_keys(&ask[..1]).unwrap(), [None]);
    assert_eq!(c.live_keys(&[]).unwrap(), Vec::<Option<u64>>::new());
}
