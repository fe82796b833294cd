package cli

import (
	"github.com/spf13/pflag"

	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/stage"
)

// refuse is a usage error when cond holds.
func refuse(cond bool, format string, args ...any) error {
	if cond {
		return usageErrorf(format, args...)
	}
	return nil
}

// engineOptions are the engine's flags that classify, serve and the worker
// share: --batch-size and --dedupe/--no-dedupe. Each command registers them
// once, with its own help (engineUse), and builds its engine.Config from
// them and the provider flags (config).
type engineOptions struct {
	batchSize int
	dedupe    bool
	noDedupe  bool

	flags *pflag.FlagSet // which flags were given
}

// engineUse is how a command words the engine's flags.
type engineUse struct {
	batchSizeHelp, dedupeHelp, noDedupeHelp string
}

// batchEngine is classify's and the worker's.
var batchEngine = engineUse{
	batchSizeHelp: "texts per provider call (" + rangeHelp(1, maxBatchSize) + ")",
	dedupeHelp:    "send identical texts once and reuse the answer",
	noDedupeHelp:  "send every row, even identical texts (the response cache still answers a text whose answer it holds: add --no-cache)",
}

func addEngineFlags(fs *pflag.FlagSet, o *engineOptions, use engineUse) {
	o.flags = fs
	fs.IntVar(&o.batchSize, "batch-size", 1, use.batchSizeHelp)
	fs.BoolVar(&o.dedupe, "dedupe", true, use.dedupeHelp)
	fs.BoolVar(&o.noDedupe, "no-dedupe", false, use.noDedupeHelp)
}

// validate checks the engine's flags against every stage's provider: -c
// bounds the texts in flight with --batch-size, and a chat model is asked
// one text a call.
func (o *engineOptions) validate(prov *providerOptions) error {
	if err := inRange("--batch-size", o.batchSize, 1, maxBatchSize, ""); err != nil {
		return err
	}
	err := prov.eachStage(func(c *stage.Config) error {
		kind, _ := c.Kind()
		if err := textsInFlight(c.Concurrency, o.batchSize); err != nil {
			return err
		}
		return refuse(kind.Chat && o.batchSize > 1, "--batch-size %d with --provider chat: a chat model is asked one text a call (packing several into one answer would let a label slip to a neighbour)", o.batchSize)
	})
	if err != nil {
		return err
	}
	// --dedupe is on by default: it contradicts --no-dedupe only when given.
	return contradict("--dedupe", "--no-dedupe", o.flags.Changed("dedupe") && o.dedupe && o.noDedupe)
}

// config is the engine's configuration as the shared flags set it; each
// command adds its own (rules, deadlines, hooks).
func (o *engineOptions) config(prov *providerOptions, cmd string) engine.Config {
	first := prov.first()
	return engine.Config{
		AdmissionWait: first.AdmissionWait,
		RowDeadline:   first.RowDeadline,
		BatchSize:     o.batchSize,
		Dedupe:        o.dedupe && !o.noDedupe,
		KeepScores:    prov.anyStage(writesScores),
		Advice:        stopAdvice(cmd, first.TokenEnv, first.Provider == "chat"),
	}
}

// progressOptions are --progress and --no-progress (classify, worker,
// queue push).
type progressOptions struct {
	progress   bool
	noProgress bool

	flags *pflag.FlagSet // which flags were given
}

// addProgressFlags registers them; what is what is drawn ("bar", "line").
func addProgressFlags(fs *pflag.FlagSet, o *progressOptions, what string) {
	o.flags = fs
	fs.BoolVar(&o.progress, "progress", false, "show a progress "+what+" on stderr (default: when stderr is a terminal)")
	fs.BoolVar(&o.noProgress, "no-progress", false, "never show a progress "+what)
}

func (o *progressOptions) validate() error {
	return contradict("--progress", "--no-progress", o.progress && o.noProgress)
}

// show decides whether to draw: as asked with --progress or --no-progress,
// else only on a terminal.
func (o *progressOptions) show(ios *IOStreams) bool {
	if o.flags.Changed("progress") || o.flags.Changed("no-progress") {
		return o.progress && !o.noProgress
	}
	return ios.ErrTTY
}

// stopAdvice words what to do after the provider stopped the run (the
// engine says what happened), for cmd: classify finishes the rows with
// --resume, a worker is started again (the rows not sent are back in the
// queue), a server goes on answering. tokenEnv is --token-env: a refused
// token is looked for where it came from; chat: the provider is a chat
// model, whose endpoint and model are spoken of as such.
func stopAdvice(cmd, tokenEnv string, chat bool) func(engine.StopReason) string {
	finish := ""
	switch cmd {
	case "classify":
		finish = "finish with --resume"
	case "worker":
		finish = "start the worker again"
	}
	then := ""
	if finish != "" {
		then = ", then " + finish
	}
	token := "check HF_TOKEN or the token file, or use --provider local"
	if tokenEnv != "" {
		token = "check the token in " + tokenEnv + " (--token-env)" + then
	}
	return func(r engine.StopReason) string {
		switch r {
		case engine.StopUnreachable:
			return "check --endpoint and the network" + then
		case engine.StopDown:
			if finish == "" {
				return "try again later"
			}
			return "try again later and " + finish
		case engine.StopQuota:
			return "top up or turn pay-as-you-go on, or bill an organisation with --bill-to ORG" + then
		case engine.StopNotFound:
			if chat {
				return "check --model (the id the chat endpoint serves) and --endpoint" + then
			}
			return "check --model and --endpoint" + then
		case engine.StopEndpoint:
			if chat {
				return "check --endpoint (an OpenAI-compatible /v1/chat/completions) and --model; a server that refuses structured outputs takes --constrain off" + then
			}
			return "check --endpoint (and --model: is it a text-classification model served there?)" + then
		case engine.StopAuth:
			return token
		}
		return ""
	}
}
