//! A radix tree over token ids whose nodes own pages of KV positions, as SGLang's RadixAttention:
//! a request takes the longest cached prefix of its tokens, what it computed is inserted, and the
//! least recently used pages that no request holds are evicted first.
//!
//! The tree is page-aligned: a node's tokens are whole pages (`page` tokens each) and it owns one
//! page id per page, so a match, an insert and an eviction move whole pages. A node's children are
//! keyed by their first page of tokens. Nodes live in an arena; a `NodeId` stays valid while its
//! node is locked: eviction skips locked nodes, and a split leaves the id on the part that ends
//! where the node ended, under a new parent that takes the head and the same locks. The tree knows
//! nothing of what a page holds: the caller owns the pages and frees the ids the tree gives back.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// A page of KV positions, owned by the caller's pool.
pub type PageId = u32;
/// A node of the tree (index into its arena).
pub type NodeId = usize;

const ROOT: NodeId = 0;

struct Node {
    /// `pages.len() * page` tokens: the edge from the parent (empty for the root).
    tokens: Vec<u32>,
    pages: Vec<PageId>,
    children: HashMap<Vec<u32>, NodeId>,
    parent: NodeId,
    /// Locks held on this node or a node below it: a locked node is never evicted.
    locks: u32,
    last_used: u64,
}

/// The longest cached prefix of a sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Match {
    /// Tokens matched: a multiple of the page size.
    pub tokens: usize,
    /// Their pages, in order.
    pub pages: Vec<PageId>,
    /// The node where the match ends (the root when nothing matched): lock it to keep the pages.
    pub node: NodeId,
}

/// What an insert kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inserted {
    /// Leading tokens that were cached already; the caller's pages for them were not taken.
    pub cached_tokens: usize,
    /// The caller's pages the tree did not take (positions already cached): the caller frees them.
    pub unused: Vec<PageId>,
    /// The node where the inserted sequence ends.
    pub node: NodeId,
}

pub struct RadixTree {
    page: usize,
    nodes: Vec<Option<Node>>,
    free_nodes: Vec<NodeId>,
    clock: u64,
    pages: usize,
}

impl RadixTree {
    /// An empty tree of pages of `page` tokens (`page >= 1`).
    pub fn new(page: usize) -> RadixTree {
        assert!(page >= 1, "a page holds at least one token");
        let root = Node {
            tokens: Vec::new(),
            pages: Vec::new(),
            children: HashMap::new(),
            parent: ROOT,
            locks: 0,
            last_used: 0,
        };
        RadixTree { page, nodes: vec![Some(root)], free_nodes: Vec::new(), clock: 0, pages: 0 }
    }

    /// Tokens per page.
    pub fn page_tokens(&self) -> usize {
        self.page
    }

    /// Pages the tree holds.
    pub fn page_count(&self) -> usize {
        self.pages
    }

    fn node(&self, id: NodeId) -> &Node {
        self.nodes[id].as_ref().expect("a live node")
    }

    fn node_mut(&mut self, id: NodeId) -> &mut Node {
        self.nodes[id].as_mut().expect("a live node")
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// The longest cached whole-page prefix of `tokens`. Marks its nodes used (for LRU), and splits
    /// the last one when the match ends inside it, so that the returned node covers the match exactly.
    pub fn match_prefix(&mut self, tokens: &[u32]) -> Match {
        let now = self.tick();
        let mut node = ROOT;
        let mut matched = 0;
        let mut pages = Vec::new();
        self.node_mut(ROOT).last_used = now;
        while let Some(&child) =
            tokens.get(matched..matched + self.page).and_then(|key| self.node(node).children.get(key))
        {
            let edge = self.shared_pages(&self.node(child).tokens, &tokens[matched..]);
            let child = if edge < self.node(child).pages.len() { self.split(child, edge) } else { child };
            let c = self.node_mut(child);
            c.last_used = now;
            pages.extend_from_slice(&c.pages);
            matched += c.tokens.len();
            node = child;
        }
        Match { tokens: matched, pages, node }
    }

    /// Whole pages at the start of `edge` that `tokens` begins with.
    fn shared_pages(&self, edge: &[u32], tokens: &[u32]) -> usize {
        edge.chunks(self.page).zip(tokens.chunks_exact(self.page)).take_while(|(a, b)| a == b).count()
    }

    /// Split `id` after its first `keep` pages (0 < keep < its pages): a new node takes them and
    /// becomes `id`'s parent; `id` keeps the rest, its children and its id. The new node.
    fn split(&mut self, id: NodeId, keep: usize) -> NodeId {
        let page = self.page;
        let (parent, locks, last_used) = {
            let n = self.node(id);
            (n.parent, n.locks, n.last_used)
        };
        let n = self.node_mut(id);
        let tail_tokens = n.tokens.split_off(keep * page);
        let tail_pages = n.pages.split_off(keep);
        let head_tokens = std::mem::replace(&mut n.tokens, tail_tokens);
        let head_pages = std::mem::replace(&mut n.pages, tail_pages);
        let child_key = n.tokens[..page].to_vec();
        let head = Node {
            tokens: head_tokens,
            pages: head_pages,
            children: HashMap::from([(child_key, id)]),
            parent,
            locks,
            last_used,
        };
        let head_id = self.alloc(head);
        self.node_mut(id).parent = head_id;
        let key = self.node(head_id).tokens[..page].to_vec();
        self.node_mut(parent).children.insert(key, head_id);
        head_id
    }

    fn alloc(&mut self, node: Node) -> NodeId {
        match self.free_nodes.pop() {
            Some(id) => {
                self.nodes[id] = Some(node);
                id
            }
            None => {
                self.nodes.push(Some(node));
                self.nodes.len() - 1
            }
        }
    }

    /// Insert the whole pages of `tokens` with `pages` (one id per page, `pages.len() * page <=
    /// tokens.len()`). Pages of positions already cached are not taken: they come back in `unused`.
    pub fn insert(&mut self, tokens: &[u32], pages: &[PageId]) -> Inserted {
        assert!(pages.len() * self.page <= tokens.len(), "more pages than the tokens fill");
        let tokens = &tokens[..pages.len() * self.page];
        let m = self.match_prefix(tokens);
        let done = m.tokens / self.page;
        let unused = pages[..done].to_vec();
        if done == pages.len() {
            return Inserted { cached_tokens: m.tokens, unused, node: m.node };
        }
        let now = self.clock;
        let node = Node {
            tokens: tokens[m.tokens..].to_vec(),
            pages: pages[done..].to_vec(),
            children: HashMap::new(),
            parent: m.node,
            locks: 0,
            last_used: now,
        };
        self.pages += node.pages.len();
        let key = node.tokens[..self.page].to_vec();
        let id = self.alloc(node);
        self.node_mut(m.node).children.insert(key, id);
        Inserted { cached_tokens: m.tokens, unused, node: id }
    }

    /// Keep `node` and the nodes above it from eviction until `unlock(node)`.
    pub fn lock(&mut self, node: NodeId) {
        let mut id = node;
        loop {
            self.node_mut(id).locks += 1;
            if id == ROOT {
                break;
            }
            id = self.node(id).parent;
        }
    }

    /// Undo one `lock(node)`.
    pub fn unlock(&mut self, node: NodeId) {
        let mut id = node;
        loop {
            let n = self.node_mut(id);
            n.locks = n.locks.checked_sub(1).expect("unlock without a lock");
            if id == ROOT {
                break;
            }
            id = self.node(id).parent;
        }
    }

    /// Pages no lock holds (what `evict` could free).
    pub fn evictable_pages(&self) -> usize {
        self.nodes.iter().flatten().filter(|n| n.locks == 0).map(|n| n.pages.len()).sum()
    }

    /// Free at least `want` pages if that many are unlocked, least recently used first: the last
    /// pages of unlocked leaves, so that a node's head outlives its tail. The freed pages.
    pub fn evict(&mut self, want: usize) -> Vec<PageId> {
        let mut freed = Vec::new();
        let mut leaves: BinaryHeap<Reverse<(u64, NodeId)>> = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(id, n)| n.as_ref().map(|n| (id, n)))
            .filter(|&(id, n)| id != ROOT && n.children.is_empty() && n.locks == 0)
            .map(|(id, n)| Reverse((n.last_used, id)))
            .collect();
        while freed.len() < want {
            let Some(Reverse((_, id))) = leaves.pop() else { break };
            let page = self.page;
            let n = self.node_mut(id);
            let take = (want - freed.len()).min(n.pages.len());
            let keep = n.pages.len() - take;
            freed.extend(n.pages.drain(keep..).rev());
            n.tokens.truncate(keep * page);
            self.pages -= take;
            if keep == 0 {
                let parent = self.remove_leaf(id);
                let p = self.node(parent);
                if parent != ROOT && p.children.is_empty() && p.locks == 0 {
                    leaves.push(Reverse((p.last_used, parent)));
                }
            }
        }
        freed
    }

    /// Remove an empty leaf; its parent.
    fn remove_leaf(&mut self, id: NodeId) -> NodeId {
        let parent = self.node(id).parent;
        self.node_mut(parent).children.retain(|_, &mut c| c != id);
        self.nodes[id] = None;
        self.free_nodes.push(id);
        parent
    }

    /// Every node but the root, parents before children: (parent, tokens, pages).
    pub fn nodes(&self) -> Vec<(NodeId, &[u32], &[PageId])> {
        let mut out = Vec::new();
        let mut stack = vec![ROOT];
        while let Some(id) = stack.pop() {
            let n = self.node(id);
            if id != ROOT {
                out.push((n.parent, n.tokens.as_slice(), n.pages.as_slice()));
            }
            stack.extend(n.children.values().copied());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, HashSet};

    use crate::test_support::{test, Rng};

    /// The plain model the tree is checked against: the set of cached page prefixes (a page is
    /// identified by every token up to its end), each with its page id.
    #[derive(Default)]
    struct Reference {
        pages: BTreeMap<Vec<u32>, PageId>,
    }

    impl Reference {
        fn matched(&self, tokens: &[u32], page: usize) -> Vec<PageId> {
            let mut out = Vec::new();
            for end in (page..=tokens.len()).step_by(page) {
                match self.pages.get(&tokens[..end]) {
                    Some(&p) => out.push(p),
                    None => break,
                }
            }
            out
        }
    }

    fn below(rng: &mut Rng, n: u64) -> u64 {
        (rng.next_u64() >> 32) % n
    }

    #[test]
    fn matches_split_nodes_and_share_prefixes() {
        let mut t = RadixTree::new(2);
        let a = t.insert(&[1, 2, 3, 4, 5, 6, 7], &[10, 11, 12]);
        assert_eq!((a.cached_tokens, a.unused.len()), (0, 0));
        // A second conversation with the same first two pages stores only its own third page.
        let b = t.insert(&[1, 2, 3, 4, 9, 9], &[20, 21, 22]);
        assert_eq!((b.cached_tokens, b.unused), (4, vec![20, 21]));
        assert_eq!(t.page_count(), 4);
        assert_eq!(t.match_prefix(&[1, 2, 3, 4, 5, 6, 0]).pages, vec![10, 11, 12]);
        assert_eq!(t.match_prefix(&[1, 2, 3, 4, 9, 9, 9, 9]).pages, vec![10, 11, 22]);
        assert_eq!(t.match_prefix(&[1, 2, 3]).pages, vec![10]);
        assert_eq!(t.match_prefix(&[1, 3]).tokens, 0);
        // A partial page never matches.
        assert_eq!(t.match_prefix(&[1]).tokens, 0);
    }

    #[test]
    fn eviction_takes_least_recently_used_unlocked_tails() {
        let mut t = RadixTree::new(1);
        t.insert(&[1, 2, 3], &[1, 2, 3]);
        t.insert(&[7, 8], &[7, 8]);
        let held = t.match_prefix(&[1, 2, 3]).node; // [1,2,3] used last
        t.lock(held);
        assert_eq!(t.evictable_pages(), 2);
        // The locked path is never evicted, however much is asked for.
        assert_eq!(t.evict(10), vec![8, 7]);
        assert_eq!(t.match_prefix(&[1, 2, 3]).tokens, 3);
        t.unlock(held);
        assert_eq!(t.evict(1), vec![3]);
        assert_eq!(t.match_prefix(&[1, 2, 3]).pages, vec![1, 2]);
    }

    #[test]
    fn random_inserts_matches_locks_and_evictions_agree_with_the_reference() {
        for seed in 1..=20u64 {
            let page = 1 + (seed % 3) as usize;
            let mut rng = Rng::new(seed);
            let mut t = RadixTree::new(page);
            let mut r = Reference::default();
            let mut next_page: PageId = 0;
            let mut locked: Vec<(NodeId, Vec<u32>)> = Vec::new();
            let budget = 40;
            let (mut evicted, mut lock_held) = (0, false);
            for step in 0..400 {
                // Sequences over a small alphabet share prefixes often.
                let len = below(&mut rng, 12) as usize;
                let tokens: Vec<u32> = (0..len).map(|_| below(&mut rng, 3) as u32).collect();
                match below(&mut rng, 5) {
                    0 | 1 => {
                        let n = len / page;
                        let pages: Vec<PageId> = (0..n as PageId).map(|i| next_page + i).collect();
                        next_page += n as PageId;
                        let want = r.matched(&tokens, page);
                        let ins = t.insert(&tokens, &pages);
                        assert_eq!(ins.cached_tokens, want.len() * page, "seed {seed} step {step}");
                        assert_eq!(ins.unused, pages[..want.len()].to_vec());
                        for (i, &p) in pages.iter().enumerate().skip(want.len()) {
                            r.pages.insert(tokens[..(i + 1) * page].to_vec(), p);
                        }
                    }
                    2 => {
                        let m = t.match_prefix(&tokens);
                        assert_eq!(m.pages, r.matched(&tokens, page), "seed {seed} step {step}");
                        assert_eq!(m.tokens, m.pages.len() * page);
                        if !m.pages.is_empty() && locked.len() < 3 {
                            t.lock(m.node);
                            locked.push((m.node, tokens[..m.tokens].to_vec()));
                        }
                    }
                    3 if !locked.is_empty() => {
                        let (node, _) = locked.remove(below(&mut rng, locked.len() as u64) as usize);
                        t.unlock(node);
                    }
                    _ => {}
                }
                // Hold the budget as a cache would.
                if t.page_count() > budget {
                    let over = t.page_count() - budget;
                    let evictable = t.evictable_pages();
                    let freed = t.evict(over);
                    assert_eq!(freed.len(), over.min(evictable), "seed {seed} step {step}");
                    evicted += freed.len();
                    lock_held |= !locked.is_empty();
                    let freed: HashSet<PageId> = freed.into_iter().collect();
                    r.pages.retain(|_, p| !freed.contains(p));
                    // What the tree evicted left no hole: every cached page's prefix pages are cached.
                    for key in r.pages.keys() {
                        assert_eq!(r.matched(key, page).len() * page, key.len(), "seed {seed}: a hole at {key:?}");
                    }
                }
                assert_eq!(t.page_count(), r.pages.len(), "seed {seed} step {step}");
                // Locked prefixes are still whole.
                for (_, tokens) in &locked {
                    assert_eq!(r.matched(tokens, page).len() * page, tokens.len(), "seed {seed} step {step}");
                }
            }
            // The run went through evictions, some while locks were held.
            assert!(evicted > 0 && lock_held, "seed {seed}: {evicted} evicted");
        }
    }
}
