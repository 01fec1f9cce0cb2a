//! Partition assignment and filter generation (spec §6), as pure functions.

use super::model::MemberMapping;

/// The partitions `member` owns, given the membership. Balanced when `members` is
/// non-empty (deduplicate, sort byte-wise, cap at N, contiguous runs then a
/// round-robin remainder); otherwise the member's mapping, in the mapping's order.
pub fn partitions(
    max_members: u32,
    members: &[String],
    mappings: &[MemberMapping],
    member: &str,
) -> Vec<u32> {
    if !members.is_empty() {
        let sorted = balanced_members(members, max_members);
        let Some(index) = sorted.iter().position(|m| m == member) else {
            return Vec::new();
        };
        let m = sorted.len() as u32;
        if m == 0 {
            return Vec::new();
        }
        let per = max_members / m;
        let full = m * per;
        return (0..max_members)
            .filter(|&p| {
                let owner = if p < full { p / per } else { (p - full) % m };
                owner as usize == index
            })
            .collect();
    }
    mappings
        .iter()
        .find(|mm| mm.member == member)
        .map(|mm| mm.partitions.clone())
        .unwrap_or_default()
}

/// The member list after deduplication, byte-wise sorting and capping at N.
pub fn balanced_members(members: &[String], max_members: u32) -> Vec<String> {
    let mut sorted: Vec<String> = Vec::new();
    for m in members {
        if !sorted.contains(m) {
            sorted.push(m.clone());
        }
    }
    sorted.sort();
    sorted.truncate(max_members as usize);
    sorted
}

/// Whether `member` is in the membership (listed, or named by a mapping), capped or
/// not.
pub fn in_membership(members: &[String], mappings: &[MemberMapping], member: &str) -> bool {
    if !members.is_empty() {
        members.iter().any(|m| m == member)
    } else {
        mappings.iter().any(|m| m.member == member)
    }
}

/// The consumer filters: for each configured filter (or `>` when none), in order,
/// `"<p>.<filter>"` for the owned partitions. With mappings the filter is always
/// `"<p>.>"` (as the reference does); exact duplicates are removed, keeping order.
pub fn filters(partitions: &[u32], filters: &[String], mapped: bool) -> Vec<String> {
    let all = [">".to_string()];
    let filters = if filters.is_empty() {
        &all[..]
    } else {
        filters
    };
    let mut out: Vec<String> = Vec::new();
    for f in filters {
        for p in partitions {
            let s = if mapped {
                format!("{p}.>")
            } else {
                format!("{p}.{f}")
            };
            if !out.contains(&s) {
                out.push(s);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn the_reference_worked_examples() {
        let members = s(&["m3", "m1", "m2", "m1"]);
        let table = [
            (6, "m1", vec![0, 1]),
            (6, "m2", vec![2, 3]),
            (6, "m3", vec![4, 5]),
            (7, "m1", vec![0, 1, 6]),
            (7, "m2", vec![2, 3]),
            (7, "m3", vec![4, 5]),
            (8, "m1", vec![0, 1, 6]),
            (8, "m2", vec![2, 3, 7]),
            (8, "m3", vec![4, 5]),
            (8, "m4", vec![]),
        ];
        for (n, m, want) in table {
            assert_eq!(partitions(n, &members, &[], m), want, "N={n} {m}");
        }
        // Movement example: N = 6, [m1, m2] then [m1, m2, m3].
        assert_eq!(partitions(6, &s(&["m1", "m2"]), &[], "m1"), [0, 1, 2]);
        assert_eq!(partitions(6, &s(&["m1", "m2"]), &[], "m2"), [3, 4, 5]);
        let f = filters(
            &partitions(8, &members, &[], "m1"),
            &s(&["foo.*.*.>"]),
            false,
        );
        assert_eq!(f, ["0.foo.*.*.>", "1.foo.*.*.>", "6.foo.*.*.>"]);
    }

    #[test]
    fn capped_members_are_in_membership_but_own_nothing() {
        let members = s(&["a", "b", "c"]);
        assert_eq!(partitions(2, &members, &[], "c"), Vec::<u32>::new());
        assert!(in_membership(&members, &[], "c"));
        assert!(!in_membership(&members, &[], "z"));
    }

    #[test]
    fn filters_are_grouped_by_filter_then_partition() {
        assert_eq!(
            filters(&[0, 2], &s(&["foo.*", "bar.*"]), false),
            ["0.foo.*", "2.foo.*", "0.bar.*", "2.bar.*"]
        );
        assert_eq!(filters(&[1], &[], false), ["1.>"]);
        assert!(filters(&[], &s(&["a"]), false).is_empty());
    }

    #[test]
    fn mappings_keep_their_order_ignore_filters_and_drop_duplicates() {
        let mappings = vec![
            MemberMapping {
                member: "m1".into(),
                partitions: vec![3, 0],
            },
            MemberMapping {
                member: "m2".into(),
                partitions: vec![1, 2],
            },
        ];
        let p = partitions(4, &[], &mappings, "m1");
        assert_eq!(p, [3, 0]);
        assert_eq!(filters(&p, &s(&["foo.*", "bar.*"]), true), ["3.>", "0.>"]);
        assert!(in_membership(&[], &mappings, "m2"));
        assert!(partitions(4, &[], &mappings, "m9").is_empty());
    }

    proptest! {
        #[test]
        fn balanced_assignment_is_a_partition_with_contiguous_runs_and_order_independent(
            n in 1u32..40,
            names in proptest::collection::vec("[a-e]{1,2}", 1..12),
            seed in any::<u64>(),
        ) {
            let sorted = balanced_members(&names, n);
            let mut owners = vec![0usize; n as usize];
            for m in &sorted {
                let ps = partitions(n, &names, &[], m);
                for p in &ps { owners[*p as usize] += 1; }
                // The run part is contiguous: all but the remainder are consecutive.
                let per = n / sorted.len() as u32;
                let run: Vec<u32> = ps.iter().copied().filter(|p| *p < per * sorted.len() as u32).collect();
                prop_assert!(run.windows(2).all(|w| w[1] == w[0] + 1));
            }
            prop_assert!(owners.iter().all(|c| *c == 1), "every partition owned exactly once: {owners:?}");
            // Any input order gives the same answer.
            let mut shuffled = names.clone();
            let k = (seed as usize) % shuffled.len();
            shuffled.rotate_left(k);
            shuffled.reverse();
            for m in &sorted {
                prop_assert_eq!(partitions(n, &names, &[], m), partitions(n, &shuffled, &[], m));
            }
        }
    }
}
