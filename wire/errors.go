package wire

import "fmt"

// Code is a machine-readable reason code. The values are part of the public
// contract: they appear in job entries (reason_code, error.code) and in
// dead letters. Never rename one; add new ones only in a new minor revision
// of docs/wire-format.md.
type Code string

// Reason codes, in contract order. DecodeRequest returns malformed_json,
// wrong_type, unknown_field, missing_field, invalid_value, payload_too_large
// and unsupported_version; the others are set by the adapter and broker,
// which know the templates, the allowlist, the cluster and the inbox.
const (
	CodeMalformedJSON      Code = "malformed_json"      // data is not one valid JSON object (syntax, duplicate key, bad UTF-8, trailing bytes)
	CodeWrongType          Code = "wrong_type"          // a field has the wrong JSON type (null included)
	CodeUnknownField       Code = "unknown_field"       // a field not in the schema
	CodeMissingField       Code = "missing_field"       // a required field is absent
	CodeInvalidValue       Code = "invalid_value"       // right type, value out of range or inconsistent
	CodePayloadTooLarge    Code = "payload_too_large"   // data over MaxDataBytes (or the entry over MaxEntryBytes)
	CodeUnknownTemplate    Code = "unknown_template"    // template is not an operator-approved template
	CodeCommandNotAllowed  Code = "command_not_allowed" // command[0] is not on the allowlist
	CodeUnsupportedVersion Code = "unsupported_version" // version is not 1
	CodeImpossibleRequest  Code = "impossible_request"  // no node could ever satisfy the resources
	CodeRateLimited        Code = "rate_limited"        // the account is over its admission rate
	CodeInboxFull          Code = "inbox_full"          // the broker is shedding load
	CodeDeliveryLimit      Code = "delivery_limit"      // the request failed delivery too many times (dead-lettered)
	CodeEnvNotAllowed      Code = "env_not_allowed"     // environment names a variable the template or allowlist entry does not allow, or a loader/interpreter variable
	CodeGangIncomplete     Code = "gang_incomplete"     // a gang's members did not all arrive within the gang timeout
	CodeIdentityMismatch   Code = "identity_mismatch"   // the entry's source_module or entry_id is not the module its intake lane belongs to
	CodeAccountNotAllowed  Code = "account_not_allowed" // the request bills an account its module may not bill
)

// Codes returns every reason code, in contract order.
func Codes() []Code {
	return []Code{
		CodeMalformedJSON, CodeWrongType, CodeUnknownField, CodeMissingField,
		CodeInvalidValue, CodePayloadTooLarge, CodeUnknownTemplate,
		CodeCommandNotAllowed, CodeUnsupportedVersion, CodeImpossibleRequest,
		CodeRateLimited, CodeInboxFull, CodeDeliveryLimit,
		CodeEnvNotAllowed, CodeGangIncomplete, CodeIdentityMismatch,
		CodeAccountNotAllowed,
	}
}

// Known reports whether c is one of Codes.
func (c Code) Known() bool {
	for _, k := range Codes() {
		if c == k {
			return true
		}
	}
	return false
}

// Error is a refused request: a reason code, the offending field as a path
// ("resource_requirements.cpu_cores", "arguments[2]", "" for the whole
// document) and a human-readable message. A nil *Error means success.
type Error struct {
	Code    Code   `json:"code"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("wire: %s: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("wire: %s: %s: %s", e.Code, e.Field, e.Message)
}

func errorf(code Code, field, format string, args ...any) *Error {
	return &Error{Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}
