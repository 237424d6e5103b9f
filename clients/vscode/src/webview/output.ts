// A run's output as the view draws it: the lines an MCP tool call printed (oi_mcp's
// "⚙ filesystem.list_directory(path='.') · 0.12 s") apart from the program's own, same text.
// Pure: no DOM, so the unit tests run it in plain node.

/** A stretch of output: whole lines, all of them tool-call lines or none. */
export interface OutputRun { text: string; tool: boolean }

/** The marker oi_mcp starts each of its lines with. */
export const TOOL_MARK = '⚙ ';

/** The output cut into runs of tool-call lines and of other lines; joined, they are `text`. */
export function outputRuns(text: string): OutputRun[] {
    if (!text.includes(TOOL_MARK)) return text ? [{ text, tool: false }] : [];
    const runs: OutputRun[] = [];
    for (const line of text.split(/(?<=\n)/)) {
        const tool = line.startsWith(TOOL_MARK);
        const last = runs[runs.length - 1];
        if (last && last.tool === tool) last.text += line;
        else runs.push({ text: line, tool });
    }
    return runs;
}
