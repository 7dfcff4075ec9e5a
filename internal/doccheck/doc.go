// Package doccheck has no code: its tests keep the repository's Markdown
// documentation truthful for a newcomer who follows it (issue 11, items
// 16-18). They check that
//
//   - every path a document names (links, images, paths in code) exists in
//     the repository: a figure a user reads must be reproducible from it,
//     not from files beside it;
//   - every program a document's commands run is built by a command of the
//     same document before it (go build -o bin/ ./bench/cmd/osu before
//     bin/gorun -n 2 bin/osu), from a main package that exists;
//   - the README names every step of scripts/test.sh and every package the
//     test scripts install.
package doccheck
