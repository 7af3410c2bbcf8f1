// Trees of frames for the flame graph's other views: built from the levels a FlameGraph
// draws, turned upside down (bottom-up), cut around one function (sandwich: its callers and
// its callees), summed per function (the table), and written back as the flat levels the
// canvas draws. Recursion counts once: a function's total is that of its outermost frames.

/**
 * The tree of a FlameGraph's levels (`flame.node(l, k)` objects), `{name, total, self,
 * children, level, index, parent}` from the root; `byLevel[l][k]` finds a drawn frame's node.
 */
export function treeOf(flame) {
  const byLevel = [];
  for (let l = 0; l < flame.levels.length; l++) {
    const row = [];
    const parents = byLevel[l - 1] || [];
    let p = 0;
    for (let k = 0; k < flame.count(l); k++) {
      const n = flame.node(l, k);
      const node = { ...n, children: [], parent: null };
      // Frames are in x order on every level: the parent is the first one that ends past x.
      while (p < parents.length && parents[p].x + parents[p].total <= n.x) p++;
      if (l > 0 && p < parents.length) {
        node.parent = parents[p];
        parents[p].children.push(node);
      }
      row.push(node);
    }
    byLevel.push(row);
  }
  return { root: byLevel[0] ? byLevel[0][0] : null, byLevel };
}

function child(node, name) {
  let c = node.index.get(name);
  if (!c) {
    c = { name, total: 0, self: 0, index: new Map() };
    node.index.set(name, c);
  }
  return c;
}

function fresh(name) {
  return { name, total: 0, self: 0, index: new Map() };
}

/** Adds `value` along `names` (outermost first) under `root`, the last frame's self too. */
function addPath(root, names, value, self) {
  let cur = root;
  cur.total += value;
  for (const name of names) {
    cur = child(cur, name);
    cur.total += value;
  }
  cur.self += self;
}

/** Walks `root` depth first with the names above each node (root excluded). */
function walk(root, visit) {
  const stack = [];
  const go = (node) => {
    visit(node, stack);
    stack.push(node.name);
    for (const c of node.children) go(c);
    stack.pop();
  };
  for (const c of root.children) go(c);
}

/** The bottom-up tree: each frame's self value under its callers, leaf functions on top. */
export function invertedTree(root) {
  const out = fresh(root.name);
  walk(root, (node, above) => {
    if (!node.self) return;
    const names = [node.name];
    for (let i = above.length - 1; i >= 0; i--) names.push(above[i]);
    addPath(out, names, node.self, node.self);
  });
  return out;
}

/** `fn`'s frames that have no `fn` above them (the outermost of a recursion). */
function outermost(root, fn, visit) {
  walk(root, (node, above) => {
    if (node.name === fn && !above.includes(fn)) visit(node, above);
  });
}

/** What calls `fn`: `fn` at the top and its callers under it, bottom-up, by `fn`'s totals. */
export function callersTree(root, fn) {
  const out = fresh(fn);
  outermost(root, fn, (node, above) => {
    const names = [];
    for (let i = above.length - 1; i >= 0; i--) names.push(above[i]);
    addPath(out, names, node.total, node.total);
  });
  return out;
}

/** What `fn` calls: its outermost frames' subtrees merged, `fn` at the top. */
export function calleesTree(root, fn) {
  const out = fresh(fn);
  const merge = (into, node) => {
    into.total += node.total;
    into.self += node.self;
    for (const c of node.children) merge(child(into, c.name), c);
  };
  outermost(root, fn, (node) => merge(out, node));
  return out;
}

/**
 * A built tree (`{name, total, self, index}`) as Pyroscope's flat layout, as the API answers
 * it: `{names, levels: [[x, total, self, name], …], total, maxSelf}`, x delta-encoded.
 */
export function toFlame(root) {
  const names = [];
  const ids = new Map();
  const id = (n) => {
    if (!ids.has(n)) {
      ids.set(n, names.length);
      names.push(n);
    }
    return ids.get(n);
  };
  const levels = [];
  let maxSelf = 0;
  let row = [{ node: root, x: 0 }];
  while (row.length) {
    const level = [];
    const next = [];
    let end = 0;
    for (const { node, x } of row) {
      level.push(x - end, node.total, node.self, id(node.name));
      end = x + node.total;
      maxSelf = Math.max(maxSelf, node.self);
      // Widest first: what matters most starts on the left.
      const kids = [...node.index.values()].filter((c) => c.total > 0)
        .sort((a, b) => b.total - a.total || (a.name < b.name ? -1 : 1));
      let cx = x;
      for (const c of kids) {
        next.push({ node: c, x: cx });
        cx += c.total;
      }
    }
    levels.push(level);
    row = next;
  }
  return { names, levels, total: root.total, maxSelf };
}

/**
 * Per function under `node` (the tree's root, or a zoomed frame): `[{name, self, total}]`,
 * totals of outermost frames only. Diff trees add `left`/`right` totals.
 */
export function functionsUnder(node) {
  const by = new Map();
  const onStack = new Map();
  const visit = (n) => {
    let f = by.get(n.name);
    if (!f) {
      f = { name: n.name, self: 0, total: 0, left: 0, right: 0 };
      by.set(n.name, f);
    }
    f.self += n.self;
    const depth = onStack.get(n.name) || 0;
    if (!depth) {
      f.total += n.total;
      f.left += n.left || 0;
      f.right += n.right || 0;
    }
    onStack.set(n.name, depth + 1);
    for (const c of n.children) visit(c);
    onStack.set(n.name, depth);
  };
  // The synthetic root ("total") is not a function; a zoomed frame is.
  if (node.level === 0) node.children.forEach(visit);
  else visit(node);
  return [...by.values()];
}
