//! A merged text section is the section of the kept documents analysed
//! afresh at their new slots, byte for byte.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use sagitta_text::merge::{merge, DROPPED};
use sagitta_text::section::{encode, TextSection};
use sagitta_text::{AnalyzerKind, MemText, TextFieldSpec};

fn specs() -> Vec<TextFieldSpec> {
    vec![
        TextFieldSpec::new("title", AnalyzerKind::English),
        TextFieldSpec::new("body", AnalyzerKind::Simple),
    ]
}

const WORDS: [&str; 12] = [
    "search",
    "vector",
    "engines",
    "fast",
    "the",
    "python",
    "bindings",
    "images",
    "a",
    "searching",
    "zebra",
    "émigré",
];

/// Document `d` of field `f`: a few words picked by the numbers (some
/// documents empty).
fn doc(d: u32, f: usize) -> String {
    let n = (d * 7 + f as u32 * 3) % 6;
    (0..n)
        .map(|j| WORDS[((d * 31 + j * 17 + f as u32 * 5) % 12) as usize])
        .collect::<Vec<_>>()
        .join(" ")
}

/// A section of `docs` (ids), document `i` at slot `i`.
fn section_of(docs: &[u32]) -> Vec<u8> {
    let mut m = MemText::new(&specs());
    for (slot, &d) in docs.iter().enumerate() {
        m.add(0, slot as u32, &doc(d, 0));
        m.add(1, slot as u32, &doc(d, 1));
    }
    encode(&m, docs.len() as u32).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn merged_equals_analysed_afresh(
        sizes in prop::collection::vec(0usize..40, 1..5),
        keep in prop::collection::vec(any::<bool>(), 160),
        base_first in any::<bool>(),
    ) {
        // Inputs of distinct documents; each kept slot gets the next new
        // slot, input after input, the inputs taken in an order that
        // need not be theirs (a base segment keeping its slots first).
        let mut next_doc = 0u32;
        let inputs: Vec<Vec<u32>> = sizes
            .iter()
            .map(|&n| (0..n).map(|_| { next_doc += 1; next_doc }).collect())
            .collect();
        let mut order: Vec<usize> = (0..inputs.len()).collect();
        if !base_first {
            order.reverse();
        }
        let mut remaps: Vec<Vec<u32>> = inputs.iter().map(|d| vec![DROPPED; d.len()]).collect();
        let mut kept: Vec<u32> = Vec::new();
        let mut k = 0;
        for &i in &order {
            for s in 0..inputs[i].len() {
                if keep[k % keep.len()] {
                    remaps[i][s] = kept.len() as u32;
                    kept.push(inputs[i][s]);
                }
                k += 1;
            }
        }
        // Two slots past the last document, as a segment with dead slots
        // at its end has.
        let nslots = kept.len() as u32 + 2;
        let bytes: Vec<Vec<u8>> = inputs.iter().map(|d| section_of(d)).collect();
        let secs: Vec<TextSection<'_>> = bytes
            .iter()
            .zip(&inputs)
            .map(|(b, d)| TextSection::parse(b, d.len() as u32).unwrap())
            .collect();
        let refs: Vec<&TextSection<'_>> = secs.iter().collect();
        let rm: Vec<&[u32]> = remaps.iter().map(|r| &r[..]).collect();
        let merged = merge(&refs, &rm, &specs(), nslots).unwrap().unwrap();
        let mut fresh = MemText::new(&specs());
        for (slot, &d) in kept.iter().enumerate() {
            fresh.add(0, slot as u32, &doc(d, 0));
            fresh.add(1, slot as u32, &doc(d, 1));
        }
        prop_assert_eq!(merged, encode(&fresh, nslots).unwrap());
    }
}

#[test]
fn an_input_without_the_field_or_with_another_analyzer_is_not_merged() {
    let bytes = section_of(&[1, 2, 3]);
    let sec = TextSection::parse(&bytes, 3).unwrap();
    let remap = [0u32, 1, 2];
    let other = vec![TextFieldSpec::new("title", AnalyzerKind::Simple)];
    assert!(merge(&[&sec], &[&remap], &other, 3).unwrap().is_none());
    let absent = vec![TextFieldSpec::new("summary", AnalyzerKind::English)];
    assert!(merge(&[&sec], &[&remap], &absent, 3).unwrap().is_none());
}

#[test]
fn a_remap_past_the_merged_segment_is_an_error_not_a_panic() {
    let bytes = section_of(&[1, 2, 3]);
    let sec = TextSection::parse(&bytes, 3).unwrap();
    let remap = [0u32, 7, 2];
    assert!(merge(&[&sec], &[&remap], &specs(), 3).is_err());
}
