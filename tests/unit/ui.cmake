# Unit tests: ui (render model, markdown, widths, themes, the input editor, colour mapping).
kimi_unit_test(test_ui_text SOURCES test_ui_text.c DEPS kimi_ui_wrap kimi_ui_text_width kimi_ui_styled_lines kimi_ui_term_probe)
kimi_unit_test(test_ui_theme SOURCES test_ui_theme.c DEPS kimi_ui_theme kimi_ui_paint)
kimi_unit_test(test_ui_markdown SOURCES test_ui_markdown.c DEPS kimi_ui_markdown)
kimi_unit_test(test_ui_render_model SOURCES test_ui_render_model.c DEPS kimi_ui_render_model)
kimi_unit_test(test_ui_input SOURCES test_ui_input.c DEPS kimi_ui_input)
kimi_unit_test(test_ui_paint SOURCES test_ui_paint.c DEPS kimi_ui_paint)
kimi_unit_test(test_ui_progress_text SOURCES test_ui_progress_text.c DEPS kimi_ui_progress_text)
