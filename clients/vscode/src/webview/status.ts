// The status line above the input and the Send/Stop button: what the folder's session does now.
// Never blank while something goes on: a run shows its language and seconds at once, and the
// REPL's figures (oi/resources) as they come: "python · 12 s · 98% CPU · 512 MB".

export type Activity = 'idle' | 'thinking' | 'waiting' | 'running';

/** The REPL entry of an oi/resources notification (docs/protocol.md, oi/status). */
export interface Figures { language?: string; cpuPercent?: number; rss?: number }

/** "python · 12 s · 98% CPU · 512 MB" (the figures only when known). */
export function runLabel(language: string, seconds: number, figures?: Figures): string {
    const parts = [language || 'code', `${Math.max(0, Math.round(seconds))} s`];
    if (typeof figures?.cpuPercent === 'number') parts.push(`${Math.round(figures.cpuPercent)}% CPU`);
    if (typeof figures?.rss === 'number') parts.push(`${Math.round(figures.rss / (1024 * 1024))} MB`);
    return parts.join(' · ');
}

const WAITING = 'The proposal waits for you: Run, Skip, Edit, or reply to skip it with feedback.';

export class StatusLine {
    activity: Activity = 'idle';
    private language = '';
    private started = 0;
    private figures: Figures | undefined;
    private ticker: number | undefined;
    private notice = ''; // a retried model call: "... retrying in 2 s (retry 1 of 3)"

    constructor(
        private readonly box: HTMLElement,
        private readonly text: HTMLElement,
        private readonly stop: HTMLButtonElement,
        private readonly send: HTMLButtonElement,
        private readonly input: HTMLTextAreaElement,
    ) {}

    /** The language of the code that runs next (a confirmation chunk, the user's own run). */
    running(language: string): void {
        if (this.activity === 'running' && this.language === language) return;
        this.language = language;
        this.started = Date.now();
        this.figures = undefined;
        if (this.activity === 'running') this.draw();
    }

    /** A `retrying` status: said while the model is thinking, until the next chunk ('' clears). */
    retrying(text: string): void {
        if (text === this.notice) return;
        this.notice = text;
        this.draw();
    }

    set(activity: Activity): void {
        if (activity !== this.activity) this.notice = '';
        if (activity === 'running' && this.activity !== 'running') {
            this.started = Date.now();
            this.figures = undefined;
        }
        this.activity = activity;
        window.clearInterval(this.ticker);
        this.ticker = activity === 'running' ? window.setInterval(() => this.draw(), 1000) : undefined;
        this.draw();
    }

    /** oi/resources: the REPL's figures and the seconds the run has taken. */
    resources(repl: Figures, elapsed: number | undefined): void {
        if (this.activity !== 'running') return;
        this.figures = repl;
        if (repl.language) this.language = repl.language;
        if (typeof elapsed === 'number') this.started = Date.now() - elapsed * 1000;
        this.draw();
    }

    private draw(): void {
        const a = this.activity;
        this.box.hidden = a === 'idle';
        this.box.classList.toggle('oi-waiting', a === 'waiting');
        this.box.classList.toggle('oi-retrying', a === 'thinking' && this.notice !== '');
        this.text.textContent = a === 'thinking' ? (this.notice || 'Model thinking…')
            : a === 'waiting' ? WAITING
                : a === 'running' ? runLabel(this.language, (Date.now() - this.started) / 1000, this.figures) : '';
        // Stop where there is something to stop (Send is Stop then: one Stop, beside the input);
        // a waiting proposal is answered, not stopped.
        const busy = a === 'thinking' || a === 'running';
        this.stop.hidden = true;
        this.send.textContent = busy ? 'Stop' : 'Send';
        this.send.title = busy ? 'Stop the model and the running code' : 'Send (Enter)';
        this.send.classList.toggle('oi-stop-mode', busy);
        this.input.disabled = a === 'running';
    }
}
