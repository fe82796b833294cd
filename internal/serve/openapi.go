package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/hfsent/hfsent/internal/outcome"
)

// document is the OpenAPI 3.1 description of every route, body and error,
// with this server's limits (--max-chars, --max-items, the id rules) in
// its schemas. A test holds it to what the handlers do.
func (s *Server) document() []byte {
	type obj = map[string]any
	ref := func(name string) obj { return obj{"$ref": "#/components/schemas/" + name} }
	jsonContent := func(schema obj) obj { return obj{"application/json": obj{"schema": schema}} }
	retryAfter := obj{"Retry-After": obj{"$ref": "#/components/headers/Retry-After"}}
	allow := obj{"Allow": obj{"description": "the methods the route allows", "schema": obj{"type": "string"}}}

	errorCodes := map[int][]string{
		http.StatusBadRequest:                  {CodeBadRequest},
		http.StatusMethodNotAllowed:            {CodeMethodNotAllowed},
		http.StatusRequestEntityTooLarge:       {CodeTooLarge},
		http.StatusUnsupportedMediaType:        {CodeMediaType},
		http.StatusInternalServerError:         {CodeInternal},
		http.StatusRequestHeaderFieldsTooLarge: {CodeHeaderTooLarge},
		http.StatusNotImplemented:              {CodeNotImplemented},
	}
	for _, c := range outcome.All() {
		if st := c.Status(); st != http.StatusOK {
			errorCodes[st] = append(errorCodes[st], string(c))
		}
	}
	schemas := obj{}
	errorResponse := func(status int, desc string) obj {
		name := "Error" + strconv.Itoa(status)
		schemas[name] = obj{
			"allOf": []any{ref("Error")},
			"properties": obj{"detail": obj{"properties": obj{
				"code": obj{"enum": errorCodes[status]},
			}}},
		}
		r := obj{"description": desc, "content": jsonContent(ref(name))}
		switch status {
		case http.StatusServiceUnavailable:
			r["headers"] = retryAfter
		case http.StatusMethodNotAllowed:
			r["headers"] = allow
		}
		return r
	}
	bodyErrors := func(r obj) obj {
		r["400"] = errorResponse(400, "the body could not be read (the connection broke or timed out), or the request could not be parsed")
		r["405"] = errorResponse(405, "wrong method; Allow lists the right ones")
		r["413"] = errorResponse(413, fmt.Sprintf("body over --max-body (%d bytes); never read", s.cfg.MaxBody))
		r["431"] = errorResponse(431, "headers over 64 KiB (answered by the HTTP server itself)")
		r["501"] = errorResponse(501, "a Transfer-Encoding other than chunked (answered by the HTTP server itself)")
		r["415"] = errorResponse(415, "Content-Type is not application/json")
		r["422"] = errorResponse(422, "invalid input: detail.field names the field (request_id, text, items, body, or an unknown field's name)")
		r["500"] = errorResponse(500, "a bug: see the server log")
		return r
	}

	rules := s.rules
	id := obj{"type": "string", "minLength": 1, "pattern": `\S`,
		"description": "the caller's id, returned as sent; not blank"}
	if rules.MaxIDChars > 0 {
		id["maxLength"] = rules.MaxIDChars
	}
	if rules.IDPattern != nil {
		id["allOf"] = []any{obj{"pattern": rules.IDPattern.String()}}
		id["description"] = "the caller's id, returned as sent; not blank, and matching --id-pattern"
	}
	schemas["TextRequest"] = obj{
		"type": "object", "additionalProperties": false, "required": []string{"request_id", "text"},
		"properties": obj{
			"request_id": id,
			"text": obj{"type": "string", "minLength": 1, "maxLength": rules.MaxChars, "pattern": `\S`,
				"description": "the text to classify; not blank, at most --max-chars characters"},
		},
	}
	schemas["FeedbackResponse"] = obj{
		"type": "object", "additionalProperties": false, "required": []string{"request_id", "label", "score", "model"},
		"properties": obj{
			"request_id": obj{"type": "string"},
			"label":      obj{"type": "string", "description": "the model's highest-scoring label, e.g. POSITIVE"},
			"score":      obj{"type": []string{"number", "null"}, "minimum": 0, "maximum": 1, "description": "rounded to 4 places; null when the model gave no probability (a chat model without logprobs)"},
			"model":      obj{"type": "string", "description": "the model that answered: --fallback-model's id, or a later --cascade stage's, when it did"},
		},
	}
	addOptional(schemas["FeedbackResponse"].(obj)["properties"].(obj))
	schemas["ClassifyRequest"] = obj{
		"type": "object", "additionalProperties": false, "required": []string{"items"},
		"properties": obj{
			"items": obj{"type": "array", "minItems": 1, "maxItems": s.cfg.MaxItems, "items": ref("TextRequest"),
				"description": "an item the rules refuse is answered invalid_input in its place; the others are classified"},
		},
	}
	nullable := func(t string) obj { return obj{"type": []string{t, "null"}} }
	codes := make([]string, 0, len(outcome.All()))
	for _, c := range outcome.All() {
		codes = append(codes, string(c))
	}
	schemas["ItemResult"] = obj{
		"type": "object", "additionalProperties": false,
		"required": []string{"request_id", "status", "outcome", "label", "score", "model", "attempts", "latency_ms", "error", "retry_after"},
		"properties": obj{
			"request_id":  obj{"type": "string"},
			"status":      obj{"type": "integer", "description": "the HTTP status /feedback-sentiment would answer"},
			"outcome":     obj{"type": "string", "enum": codes},
			"label":       nullable("string"),
			"score":       nullable("number"),
			"model":       nullable("string"),
			"attempts":    obj{"type": "integer", "minimum": 0},
			"latency_ms":  obj{"type": []string{"integer", "null"}, "description": "from the first call to the answer; null when never sent"},
			"error":       obj{"type": []string{"string", "null"}, "description": "a short safe message; null on success"},
			"retry_after": obj{"type": []string{"integer", "null"}, "minimum": 1, "description": "seconds, for a 503 status"},
		},
	}
	addOptional(schemas["ItemResult"].(obj)["properties"].(obj))
	schemas["ClassifyResponse"] = obj{
		"type": "object", "additionalProperties": false, "required": []string{"results"},
		"properties": obj{"results": obj{"type": "array", "items": ref("ItemResult"),
			"description": "one per item, in order"}},
	}
	allCodes := slices.Clone(codes)
	allCodes = append(allCodes, CodeBadRequest, CodeNotFound, CodeMethodNotAllowed, CodeTooLarge, CodeMediaType, CodeInternal, CodeHeaderTooLarge, CodeNotImplemented, "draining")
	schemas["Error"] = obj{
		"type": "object", "additionalProperties": false, "required": []string{"detail"},
		"properties": obj{"detail": obj{
			"type": "object", "additionalProperties": false, "required": []string{"code", "message"},
			"properties": obj{
				"code":    obj{"type": "string", "enum": allCodes},
				"message": obj{"type": "string", "description": "a short safe message: never a provider body, header or token"},
				"field":   obj{"type": "string", "description": "for a 422: the field at fault"},
			},
		}},
	}
	schemas["Health"] = obj{"type": "object", "required": []string{"status"},
		"properties": obj{"status": obj{"const": "ok"}}}
	schemas["Ready"] = obj{"type": "object", "required": []string{"status"},
		"properties": obj{"status": obj{"const": "ready"}}}
	schemas["NotReady"] = obj{
		"allOf": []any{ref("Error")},
		"properties": obj{"detail": obj{"properties": obj{
			"code": obj{"enum": []string{"draining", string(outcome.CircuitOpen)}},
		}}},
	}

	feedback := bodyErrors(obj{
		"200": obj{"description": "the label (outcome success, or fallback)", "content": jsonContent(ref("FeedbackResponse"))},
		"502": errorResponse(502, "the provider failed, refused the call, the token or the account, or answered something that is not a classification"),
		"503": errorResponse(503, "no slot within --admission-wait (local_capacity), rate limited, breaker open, or the server is stopping; or no room in --body-budget or --max-conns for the request (local_capacity, its body never read); Retry-After says when to try again"),
		"504": errorResponse(504, "the provider did not answer in time"),
	})
	classify := bodyErrors(obj{
		"200": obj{"description": "one result per item, in order, each with its own outcome and status", "content": jsonContent(ref("ClassifyResponse"))},
		"503": errorResponse(503, "the request got no slot within --admission-wait: its items are admitted as one, so it is refused whole (local_capacity), none of them sent; or no room in --body-budget or --max-conns (local_capacity, its body never read); or the provider asked for a pause, or the server is stopping; Retry-After says when to try again"),
	})
	get := func(id, summary string, ok obj) obj {
		return obj{"get": obj{"operationId": id, "summary": summary, "responses": obj{
			"200": ok,
			"405": errorResponse(405, "wrong method; Allow lists the right ones"),
		}}}
	}
	ready := get("readyz", "Ready for traffic", obj{"description": "ready", "content": jsonContent(ref("Ready"))})
	ready["get"].(obj)["responses"].(obj)["503"] = obj{"description": "draining, or the breaker is open with no --fallback-model",
		"headers": retryAfter, "content": jsonContent(ref("NotReady"))}
	doc := obj{
		"openapi": "3.1.0",
		"info": obj{
			"title":   "hfsent",
			"version": s.cfg.Version,
			"description": "Text classification (sentiment by default) through a Hugging Face model, with admission control. " +
				"Every error answers {\"detail\": {\"code\", \"message\"}} with the status of its code; every 503 carries Retry-After in seconds. " +
				"A path not listed here answers 404 not_found.",
		},
		"paths": obj{
			PathFeedback: obj{"post": obj{
				"operationId": "feedbackSentiment",
				"summary":     "Classify one text",
				"requestBody": obj{"required": true, "content": jsonContent(ref("TextRequest"))},
				"responses":   feedback,
			}},
			PathClassify: obj{"post": obj{
				"operationId": "classify",
				"summary":     "Classify many texts in one round trip",
				"requestBody": obj{"required": true, "content": jsonContent(ref("ClassifyRequest"))},
				"responses":   classify,
			}},
			PathHealthz: get("healthz", "The process is alive", obj{"description": "alive", "content": jsonContent(ref("Health"))}),
			PathReadyz:  ready,
			PathMetrics: get("metrics", "Prometheus metrics", obj{"description": "the Prometheus text format",
				"content": obj{"text/plain": obj{"schema": obj{"type": "string"}}}}),
			PathOpenAPI: get("openapi", "This document", obj{"description": "OpenAPI 3.1",
				"content": jsonContent(obj{"type": "object"})}),
		},
		"components": obj{
			"schemas": schemas,
			"headers": obj{"Retry-After": obj{
				"description": "whole seconds before trying again, never below 1: the provider's own Retry-After, the breaker's remaining open time, or about one call's latency when the slots were full",
				"schema":      obj{"type": "integer", "minimum": 1},
			}},
		},
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("encoding the OpenAPI document: %v", err))
	}
	return append(b, '\n')
}

// addOptional adds to an answer's properties the fields that flags add
// (the results' extra columns): each is there only when its flag is on.
func addOptional(props map[string]any) {
	type obj = map[string]any
	props["raw_score"] = obj{"type": "number", "minimum": 0, "maximum": 1, "description": "with --calibration: the model's own score, rounded to 4 places (score is then the calibrated probability that the label is right); absent when the model gave none"}
	props["review"] = obj{"type": "boolean", "description": "with --review-below: true when score is under it, or there is none"}
	props["stage"] = obj{"type": "integer", "minimum": 1, "description": "with --cascade: the number of the stage that answered (or where the request ended)"}
	props["scores"] = obj{"type": "array", "minItems": 1,
		"description": "with --top-k or --multi-label: the labels the answer scored, best first (the first --top-k of them; with --multi-label every label scored), as the results' scores column; absent when the text got no label",
		"items": obj{"type": "object", "additionalProperties": false, "required": []string{"label", "score"},
			"properties": obj{
				"label": obj{"type": "string"},
				"score": obj{"type": []string{"number", "null"}, "minimum": 0, "maximum": 1, "description": "rounded to 4 places; null when the answer gave the label none"},
			}}}
	props["cached_prompt_tokens"] = obj{"type": "integer", "minimum": 0,
		"description": "with a chat model: the part of the prompt's tokens the server read from its prompt cache (usage.prompt_tokens_details.cached_tokens or its like); absent when the server reported no usage"}
}
