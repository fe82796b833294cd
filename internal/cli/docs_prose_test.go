package cli

import (
	"bytes"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"

	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/quality"
	"github.com/hfsent/hfsent/internal/queue"
	"github.com/hfsent/hfsent/internal/resilience"
)

// The README and the guides in docs/guides/ are written by hand; these tests
// keep them true to the files they point at and to the flags the commands
// have, as TestDocsAreCurrent keeps the generated reference true to the
// commands.

const repoRoot = "../.."

// markdownFiles lists every Markdown file of the project, relative to its
// root: README.md, the generated reference docs/hfsent*.md, the guides in
// docs/guides/ and any other (samples/README.md).
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != repoRoot && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			rel, _ := filepath.Rel(repoRoot, path)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"README.md", "docs/hfsent.md", "docs/guides/queue.md"} {
		if !slices.Contains(files, must) {
			t.Fatalf("no %s among the Markdown files found: %v", must, files)
		}
	}
	return files
}

func guideFiles(files []string) []string {
	var guides []string
	for _, f := range files {
		if strings.HasPrefix(f, "docs/guides/") {
			guides = append(guides, f)
		}
	}
	return guides
}

// mdDoc is a parsed Markdown file: its source, its links and the anchors
// its headings get on GitHub.
type mdDoc struct {
	src     []byte
	root    ast.Node
	links   []mdLink
	anchors map[string]bool
}

type mdLink struct {
	dest string
	line int
}

func parseMarkdown(t *testing.T, file string) *mdDoc {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	md := goldmark.New(goldmark.WithExtensions(extension.GFM))
	d := &mdDoc{src: src, root: md.Parser().Parse(text.NewReader(src)), anchors: map[string]bool{}}
	seen := map[string]int{}
	_ = ast.Walk(d.root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Heading:
			// GitHub numbers a repeated anchor: memory, memory-1, ...
			a := githubAnchor(plainText(n, src))
			if k := seen[a]; k > 0 {
				d.anchors[a+"-"+strconv.Itoa(k)] = true
			} else {
				d.anchors[a] = true
			}
			seen[a]++
		case *ast.Link:
			d.links = append(d.links, mdLink{string(n.Destination), lineOf(src, n)})
		case *ast.Image:
			d.links = append(d.links, mdLink{string(n.Destination), lineOf(src, n)})
		}
		return ast.WalkContinue, nil
	})
	return d
}

// plainText is a heading's text as GitHub slugs it: the text of its
// children, code spans included, without the markup.
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Segment.Value(src))
			if c.SoftLineBreak() {
				b.WriteByte(' ')
			}
		case *ast.String:
			b.Write(c.Value)
		case *ast.RawHTML:
		default:
			b.WriteString(plainText(c, src))
		}
	}
	return b.String()
}

// githubAnchor is the id GitHub gives a heading: lower case, every
// character but letters, digits, marks, '-' and '_' dropped, spaces made
// '-'.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.M, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// lineOf finds the line a link starts on, from the first text inside it.
func lineOf(src []byte, n ast.Node) int {
	pos := -1
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if t, ok := c.(*ast.Text); ok && entering {
			pos = t.Segment.Start
			return ast.WalkStop, nil
		}
		return ast.WalkContinue, nil
	})
	if pos < 0 {
		pos = n.Pos()
	}
	if pos < 0 {
		return 0
	}
	return bytes.Count(src[:pos], []byte("\n")) + 1
}

// checkLinks returns what is wrong with the relative links of the files:
// a target that does not exist or lies outside the project, an absolute
// path, or an #anchor that no heading of the target has. Web links are not
// fetched.
func checkLinks(t *testing.T, files []string) (problems []string, checked int) {
	t.Helper()
	docs := map[string]*mdDoc{}
	doc := func(f string) *mdDoc {
		if docs[f] == nil {
			docs[f] = parseMarkdown(t, f)
		}
		return docs[f]
	}
	for _, f := range files {
		for _, l := range doc(f).links {
			where := f + ":" + strconv.Itoa(l.line) + ": link " + l.dest
			u, err := url.Parse(l.dest)
			if err != nil {
				problems = append(problems, where+": "+err.Error())
				continue
			}
			if u.Scheme != "" || u.Host != "" {
				continue // a web link (https:, mailto:)
			}
			checked++
			if strings.HasPrefix(u.Path, "/") {
				problems = append(problems, where+": an absolute path; link relative to the file")
				continue
			}
			target := f
			if u.Path != "" {
				target = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(f), u.Path)))
				if target == ".." || strings.HasPrefix(target, "../") {
					problems = append(problems, where+": points outside the project")
					continue
				}
				if _, err := os.Stat(filepath.Join(repoRoot, target)); err != nil {
					problems = append(problems, where+": no such file "+target)
					continue
				}
			}
			if u.Fragment == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				problems = append(problems, where+": an #anchor into a file that is not Markdown")
				continue
			}
			if !doc(target).anchors[u.Fragment] {
				problems = append(problems, where+": "+target+" has no heading #"+u.Fragment)
			}
		}
	}
	return problems, checked
}

// Every relative link and #anchor in the README and docs/ resolves, none
// points outside the project, the README links to every guide and every
// guide opens with its summary and a link back to the README.
func TestDocsLinksResolve(t *testing.T) {
	files := markdownFiles(t)
	problems, checked := checkLinks(t, files)
	for _, p := range problems {
		t.Error(p)
	}
	// The reference alone has more than 30 links and the README as many;
	// fewer means the parser found none and the test checks nothing.
	if checked < 100 {
		t.Errorf("only %d relative links checked in %d files", checked, len(files))
	}

	readme := parseMarkdown(t, "README.md")
	guides := guideFiles(files)
	if len(guides) < 10 {
		t.Fatalf("only %d guides in docs/guides/: %v", len(guides), guides)
	}
	for _, g := range guides {
		if !linksTo(readme, "README.md", g) {
			t.Errorf("README.md does not link to %s", g)
		}
		d := parseMarkdown(t, g)
		first := d.root.FirstChild()
		if h, ok := first.(*ast.Heading); !ok || h.Level != 1 {
			t.Errorf("%s does not start with a # title", g)
			continue
		}
		if _, ok := first.NextSibling().(*ast.Paragraph); !ok {
			t.Errorf("%s: its title is not followed by a summary paragraph", g)
		}
		// The summary, or the line after it, links back.
		back := false
		for n, i := first.NextSibling(), 0; n != nil && i < 2; n, i = n.NextSibling(), i+1 {
			block := &mdDoc{}
			_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
				if l, ok := c.(*ast.Link); ok && entering {
					block.links = append(block.links, mdLink{dest: string(l.Destination)})
				}
				return ast.WalkContinue, nil
			})
			back = back || linksTo(block, g, "README.md")
		}
		if !back {
			t.Errorf("%s does not link back to README.md in its summary or the line after it", g)
		}
	}
}

func linksTo(d *mdDoc, from, to string) bool {
	for _, l := range d.links {
		u, err := url.Parse(l.dest)
		if err != nil || u.Scheme != "" || u.Path == "" {
			continue
		}
		if filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(from), u.Path))) == to {
			return true
		}
	}
	return false
}

// commandTree is the tree the reference is generated from (writeDocs).
func commandTree() *cobra.Command {
	root := newRootCmd(&IOStreams{})
	root.InitDefaultCompletionCmd()
	root.InitDefaultVersionFlag()
	return root
}

func allCommands(c *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{c}
	for _, sub := range c.Commands() {
		out = append(out, allCommands(sub)...)
	}
	return out
}

var flagMention = regexp.MustCompile(`(?:^|[^A-Za-z0-9_-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)(-\*)?`)

func mentions(doc []byte, flag string) bool {
	for _, m := range flagMention.FindAllSubmatch(doc, -1) {
		if string(m[1]) == flag && len(m[2]) == 0 {
			return true
		}
	}
	return false
}

// Every flag of every command is in that command's generated reference.
func TestReferenceNamesEveryFlag(t *testing.T) {
	seen := 0
	for _, c := range allCommands(commandTree()) {
		// As cobra's doc.GenMarkdownTree chooses the commands it writes.
		if !c.IsAvailableCommand() || c.IsAdditionalHelpTopicCommand() || c.Name() == "help" {
			continue
		}
		c.InitDefaultHelpFlag()
		file := "docs/" + strings.ReplaceAll(c.CommandPath(), " ", "_") + ".md"
		ref, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Errorf("hfsent %s has no reference: %v", c.Name(), err)
			continue
		}
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Hidden || f.Name == "version" {
				return // not shown in the reference (a hidden flag is refused where it hides)
			}
			seen++
			if !mentions(ref, f.Name) {
				t.Errorf("%s does not name --%s of %q", file, f.Name, c.CommandPath())
			}
		})
		c.InheritedFlags().VisitAll(func(f *pflag.Flag) {
			seen++
			if !mentions(ref, f.Name) {
				t.Errorf("%s does not name the inherited --%s of %q", file, f.Name, c.CommandPath())
			}
		})
	}
	if seen < 150 {
		t.Errorf("only %d flags seen in the command tree", seen)
	}
}

// Flags of other programs that the docs name, with the program: they are
// not hfsent's.
var foreignFlags = map[string]string{
	"ignore-missing":          "sha256sum",
	"snapshot":                "goreleaser release",
	"clean":                   "goreleaser release",
	"rm":                      "docker run",
	"model-id":                "text-embeddings-router (TEI)",
	"api-key":                 "text-embeddings-router (TEI)",
	"auto-truncate":           "text-embeddings-router (TEI)",
	"max-client-batch-size":   "text-embeddings-router (TEI)",
	"max-concurrent-requests": "text-embeddings-router (TEI)",
}

// Every --flag the README and the guides name, in prose, tables or
// examples, is a flag of some command (or one of foreignFlags): a flag renamed or
// removed cannot live on in the prose.
func TestDocsNameOnlyRealFlags(t *testing.T) {
	real := map[string]bool{}
	for _, c := range allCommands(commandTree()) {
		c.InitDefaultHelpFlag()
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags(), c.InheritedFlags()} {
			fs.VisitAll(func(f *pflag.Flag) { real[f.Name] = true })
		}
	}
	for name, tool := range foreignFlags {
		if real[name] {
			t.Errorf("--%s is listed as %s's, but hfsent has it", name, tool)
		}
	}
	foreignSeen := map[string]bool{}
	checked := 0
	for _, f := range markdownFiles(t) {
		if generated, _ := filepath.Match("docs/hfsent*.md", f); generated {
			continue // written from the command tree (and cobra's own words)
		}
		src, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range flagMention.FindAllSubmatchIndex(src, -1) {
			name := string(src[m[2]:m[3]])
			line := bytes.Count(src[:m[2]], []byte("\n")) + 1
			checked++
			if m[4] >= 0 { // --breaker-*: some flag must start so
				found := false
				for r := range real {
					if strings.HasPrefix(r, name+"-") {
						found = true
					}
				}
				if !found {
					t.Errorf("%s:%d: no flag matches --%s-*", f, line, name)
				}
				continue
			}
			if _, ok := foreignFlags[name]; ok {
				foreignSeen[name] = true
				continue
			}
			if !real[name] {
				t.Errorf("%s:%d: --%s is no flag of any hfsent command", f, line, name)
			}
		}
	}
	for name := range foreignFlags {
		if !foreignSeen[name] {
			t.Errorf("--%s (%s) is no longer named in the docs: drop it from foreignFlags", name, foreignFlags[name])
		}
	}
	if checked < 300 {
		t.Errorf("only %d flag mentions found in the docs", checked)
	}
}

// Every counter the summary line can print (classify's, the worker's) is
// documented: named in backticks, alone or as key=..., in the README or a
// guide. The line is drawn from summaries with every count set, so a
// counter added later fails here until it is described.
func TestSummaryLineCountersAreDocumented(t *testing.T) {
	counts := map[outcome.Code]int64{}
	for _, c := range outcome.All() {
		counts[c] = 1
	}
	sum := engine.Summary{Rows: 9, Written: 8, Lost: 1, Counts: counts, Kept: 1, Reused: 1, MaxActive: 2, Elapsed: time.Second,
		Stop: engine.StopInterrupted, Provider: resilience.Stats{Policies: true, Calls: 9, Retries: 1, FallbackCalls: 1,
			PromptTokens: 1, CompletionTokens: 1, TokenCalls: 1, CachedPromptTokens: 1, RateLimited: 1, Timeouts: 1, BreakerOpenings: 1, BreakerOpen: time.Second,
			FallbackRows: 1, Cooldowns: 1, MaxInFlight: 1, Limit: 3, CallsPerSec: 1}}
	line := workerSummaryLine(sum, queue.WorkerStats{Claimed: 1, Swapped: 1, Retried: 1, GivenBack: 1, Discarded: 1, Cycles: 1, CycleTime: time.Millisecond}, true)
	// And the quality keys of a run with gold labels.
	line += (&qualityRun{o: &qualityOptions{}, report: &quality.Report{}}).keys()
	// And those of a multi-label run.
	line += (&qualityRun{o: &qualityOptions{}, report: &quality.Report{Multi: &quality.MultiReport{}}}).keys()
	var docs strings.Builder
	paths, _ := filepath.Glob(filepath.Join(repoRoot, "docs", "guides", "*.md"))
	for _, p := range append(paths, filepath.Join(repoRoot, "README.md")) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(b)
	}
	keys := regexp.MustCompile(`(?:^| )([^ =]+)=`).FindAllStringSubmatch(line, -1)
	if len(keys) < 40 {
		t.Fatalf("%d keys in %q: the summary was not filled", len(keys), line)
	}
	for _, k := range keys {
		if !strings.Contains(docs.String(), "`"+k[1]+"`") && !strings.Contains(docs.String(), "`"+k[1]+"=") {
			t.Errorf("the summary line's %s is not documented (in backticks) in the README or a guide", k[1])
		}
	}
}

// The README's first two commands say what they fetch: the modules the
// binary is built from (how many), and each module only the tests use.
// The README said neither needed the network, and go test ./... fetched 8
// modules of its own. go list tells, offline, from the module cache.
func TestREADMESaysWhatTheFirstCommandsFetch(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	modules := func(args ...string) []string {
		cmd := exec.Command(goBin, append([]string{"list", "-deps", "-f", "{{with .Module}}{{if not .Main}}{{.Path}}{{end}}{{end}}"}, args...)...)
		cmd.Dir = repoRoot
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %v: %v", args, err)
		}
		var m []string
		for _, l := range strings.Fields(string(out)) {
			if !slices.Contains(m, l) {
				m = append(m, l)
			}
		}
		return m
	}
	built := modules("./cmd/hfsent")
	var testOnly []string
	for _, m := range modules("-test", "./...") {
		if !slices.Contains(built, m) {
			testOnly = append(testOnly, m)
		}
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(readme)
	section = section[strings.Index(section, "## First two commands"):]
	section = strings.Join(strings.Fields(section[:strings.Index(section[3:], "\n## ")+3]), " ")
	for _, want := range []string{fmt.Sprintf("the %d modules hfsent is built from", len(built)), fmt.Sprintf("the second %d more", len(testOnly))} {
		if !strings.Contains(section, want) {
			t.Errorf("the README's first two commands do not say %q", want)
		}
	}
	for _, m := range testOnly {
		if !strings.Contains(section, "`"+m+"`") {
			t.Errorf("the README's first two commands do not name %s, which go test ./... fetches", m)
		}
	}
}
