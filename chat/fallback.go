package chat

// chatML is the template llama.cpp's server falls back to when a model has none, extended with
// tools as the Qwen 2.5/3 and Hermes templates write them, so that a model without a template
// is still shown the functions it may call and the format DetectToolFormat picks for it
// (Hermes: <tool_call>{"name": ..., "arguments": ...}</tool_call>):
//
//   - with tools, a system turn first: the system message's content if the conversation opens
//     with one, then the tools, one JSON object a line, inside <tools></tools>, and how to call
//     them;
//   - an assistant message's tool_calls, after its content, one <tool_call> block each;
//   - tool messages as a user turn of <tool_response> blocks, consecutive ones in one turn.
//
// Without tools and tool messages it is llama.cpp's ChatML exactly. As there, a content given as
// a list of parts contributes its text parts joined by "\n" and ignores the rest (images,
// audio).
const chatML = `{%- macro render_content(content) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- elif content is sequence -%}
        {%- set ns = namespace(sep='') -%}
        {%- for part in content if part is mapping and part.type == 'text' -%}
            {{- ns.sep -}}{{- part.text -}}
            {%- set ns.sep = '\n' -%}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- set system_in_tools = tools and messages | length > 0 and messages[0].role == 'system' -%}
{%- if tools -%}
    {{- '<|im_start|>system\n' -}}
    {%- if system_in_tools -%}
        {{- render_content(messages[0].content) + '\n\n' -}}
    {%- endif -%}
    {{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
    {%- for tool in tools -%}
        {{- '\n' -}}{{- tool | tojson -}}
    {%- endfor -%}
    {{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
    {%- if message.role == 'tool' -%}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}
            {{- '<|im_start|>user' -}}
        {%- endif -%}
        {{- '\n<tool_response>\n' -}}{{- render_content(message.content) -}}{{- '\n</tool_response>' -}}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}
            {{- '<|im_end|>\n' -}}
        {%- endif -%}
    {%- elif not (loop.first and system_in_tools) -%}
        {{- '<|im_start|>' -}}{{- message.role -}}{{- '\n' -}}{{- render_content(message.content) -}}
        {%- if message.role == 'assistant' and message.tool_calls -%}
            {%- for tool_call in message.tool_calls -%}
                {%- if tool_call.function is defined -%}
                    {%- set tool_call = tool_call.function -%}
                {%- endif -%}
                {%- if not loop.first or message.content -%}
                    {{- '\n' -}}
                {%- endif -%}
                {{- '<tool_call>\n{"name": ' -}}{{- tool_call.name | tojson -}}{{- ', "arguments": ' -}}
                {%- if tool_call.arguments is string -%}
                    {{- tool_call.arguments -}}
                {%- else -%}
                    {{- tool_call.arguments | tojson -}}
                {%- endif -%}
                {{- '}\n</tool_call>' -}}
            {%- endfor -%}
        {%- endif -%}
        {{- '<|im_end|>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
{%- endif -%}`

// Fallback returns the ChatML template (<|im_start|>role\ncontent<|im_end|>\n per message, then
// <|im_start|>assistant\n when a generation prompt is asked for, with tools as described at
// chatML), which llama.cpp's server uses for models without a template.
func Fallback() *Template {
	t, err := Parse(chatML)
	if err != nil {
		// chatML is a constant; failing to parse it is a programming error.
		panic("chat: built-in ChatML template does not parse: " + err.Error())
	}
	return t
}
