//! Partition assignment and filter generation (spec §6), as pure functions.

use super::model::MemberMapping;

/// The partitions `member` owns, given the membership. Balanced when `members` is
/// non-empty (deduplicate, sort byte-wise, cap at N, contiguous runs then a
/// round-robin remainder); otherwise the member's mapping, in the mapping's order.
/// Linear in the members and in the partitions returned, never in N alone.
pub fn partitions(
    max_members: u32,
    members: &[String],
    mappings: &[MemberMapping],
    member: &str,
) -> Vec<u32> {
    if !members.is_empty() {
        let sorted = balanced_members(members, max_members);
        let Ok(index) = sorted.binary_search_by(|m| m.as_str().cmp(member)) else {
            return Vec::new();
        };
        // `sorted` is capped at N, so it has at most N members: m <= N, per >= 1.
        let (m, index) = (sorted.len() as u32, index as u32);
        let per = max_members / m;
        let full = m * per;
        // Its contiguous run, then the one remainder partition it may get
        // (`full + index`: there are fewer than m remainders).
        let mut own: Vec<u32> = (index * per..(index + 1) * per).collect();
        if full + index < max_members {
            own.push(full + index);
        }
        return own;
    }
    mappings
        .iter()
        .find(|mm| mm.member == member)
        .map(|mm| mm.partitions.clone())
        .unwrap_or_default()
}

/// Every member's partitions at once (`jetrelay group … info`), each as
/// [`partitions`] gives it: the member list is sorted once, not once per member, so
/// that a membership of tens of thousands costs a sort, not a sort per member.
pub fn every_partition(
    max_members: u32,
    members: &[String],
    mappings: &[MemberMapping],
) -> std::collections::HashMap<String, Vec<u32>> {
    let mut out = std::collections::HashMap::new();
    if members.is_empty() {
        for mm in mappings {
            out.entry(mm.member.clone())
                .or_insert_with(|| mm.partitions.clone());
        }
        return out;
    }
    let sorted = balanced_members(members, max_members);
    // `sorted` is capped at N: m <= N, per >= 1 (as in `partitions`).
    let m = sorted.len() as u32;
    if m == 0 {
        return out;
    }
    let per = max_members / m;
    let full = m * per;
    for (index, member) in (0u32..).zip(sorted) {
        let mut own: Vec<u32> = (index * per..(index + 1) * per).collect();
        if full + index < max_members {
            own.push(full + index);
        }
        out.insert(member, own);
    }
    out
}

/// The member list after deduplication, byte-wise sorting and capping at N.
pub fn balanced_members(members: &[String], max_members: u32) -> Vec<String> {
    let mut sorted: Vec<String> = members.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
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
    let mut seen = std::collections::HashSet::new();
    for f in filters {
        for p in partitions {
            let s = if mapped {
                format!("{p}.>")
            } else {
                format!("{p}.{f}")
            };
            if seen.insert(s.clone()) {
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

    /// The reference's definition, partition by partition (spec §6): the model for
    /// the linear computation.
    fn owner_by_owner(n: u32, members: &[String], member: &str) -> Vec<u32> {
        let sorted = balanced_members(members, n);
        let Some(index) = sorted.iter().position(|m| m == member) else {
            return Vec::new();
        };
        let m = sorted.len() as u32;
        let per = n / m;
        let full = m * per;
        (0..n)
            .filter(|&p| (if p < full { p / per } else { (p - full) % m }) as usize == index)
            .collect()
    }

    #[test]
    fn a_huge_or_crowded_membership_costs_what_it_returns() {
        // 100 000 members: sorted once, not searched member by member.
        let many: Vec<String> = (0..100_000).map(|i| format!("m{i}")).collect();
        assert_eq!(partitions(100_000, &many, &[], "m99999").len(), 1);
        assert_eq!(balanced_members(&many, 10).len(), 10);
        // A member capped out of a huge N's membership: nothing to compute.
        assert!(partitions(u32::MAX, &many, &[], "nobody").is_empty());
    }

    proptest! {
        #[test]
        fn the_linear_assignment_is_the_reference_one(
            n in 1u32..300,
            names in proptest::collection::vec("[a-z]{1,3}", 1..40),
            pick in any::<usize>(),
        ) {
            let member = &names[pick % names.len()];
            prop_assert_eq!(partitions(n, &names, &[], member), owner_by_owner(n, &names, member));
            prop_assert!(partitions(n, &names, &[], "not-a-member").is_empty());
        }

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

    proptest! {
        #[test]
        fn every_partition_agrees_with_partitions_member_by_member(
            n in 1u32..40,
            members in proptest::collection::vec("[a-e]{1,2}", 0..30),
            extra in "[a-e]{1,2}",
        ) {
            let mappings = vec![MemberMapping { member: "x".into(), partitions: vec![0] }];
            let all = every_partition(n, &members, &mappings);
            let mut names = members.clone();
            names.push(extra);
            names.push("x".into());
            for m in &names {
                let want = partitions(n, &members, &mappings, m);
                prop_assert_eq!(all.get(m).cloned().unwrap_or_default(), want, "{}", m);
            }
        }
    }
}
