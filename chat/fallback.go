package chat

// chatML is the template llama.cpp's server falls back to when a model has
// none. As there, a content given as a list of parts contributes its text
// parts joined by "\n" and ignores the rest (images, audio).
const chatML = `{%- for message in messages -%}
<|im_start|>{{ message.role }}
{% if message.content is string -%}
{{ message.content }}
{%- elif message.content is sequence -%}
{%- set ns = namespace(sep='') -%}
{%- for part in message.content if part is mapping and part.type == 'text' -%}
{{ ns.sep }}{{ part.text }}{% set ns.sep = '\n' %}
{%- endfor -%}
{%- endif -%}
<|im_end|>
{% endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}`

// Fallback returns the ChatML template (<|im_start|>role\ncontent<|im_end|>\n
// per message, then <|im_start|>assistant\n when a generation prompt is
// asked for), which llama.cpp's server uses for models without a template.
func Fallback() *Template {
	t, err := Parse(chatML)
	if err != nil {
		// chatML is a constant; failing to parse it is a programming error.
		panic("chat: built-in ChatML template does not parse: " + err.Error())
	}
	return t
}
