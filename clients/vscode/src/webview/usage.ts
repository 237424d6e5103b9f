// A turn's tokens and cost (oi/turn's usage), shown small under the turn.
import { showSessionCost, usd } from './header';

export interface Usage {
    promptTokens: number; completionTokens: number; calls: number; cost?: number; sessionCost?: number;
    // The provider's own counts, when it reports them (docs/protocol.md, oi/turn).
    reasoningTokens?: number; cachedTokens?: number; cacheWriteTokens?: number; cacheSaved?: number;
}

const n = (x: number): string => x.toLocaleString('en-US');

/** "1,256 tokens (1,200 in, 1,000 cached; 56 out, 40 reasoning) · $0.0021 (cache saved $0.0030)" */
export function usageText(u: Usage): string {
    const tokens = u.promptTokens + u.completionTokens;
    const into = `${n(u.promptTokens)} in${u.cachedTokens ? `, ${n(u.cachedTokens)} cached` : ''}`;
    const out = `${n(u.completionTokens)} out${u.reasoningTokens ? `, ${n(u.reasoningTokens)} reasoning` : ''}`;
    const parts = [`${n(tokens)} tokens (${into}${u.cachedTokens || u.reasoningTokens ? ';' : ','} ${out})`];
    if (u.calls > 1) parts.push(`${u.calls} model calls`);
    if (u.cost !== undefined) {
        const saved = u.cacheSaved !== undefined && u.cacheSaved > 0 ? ` (cache saved ${usd(u.cacheSaved)})` : '';
        parts.push(usd(u.cost) + saved);
    }
    return parts.join(' · ');
}

/** The line under the turn, and the session's total in the header. */
export function showUsage(log: HTMLElement, u: Usage): void {
    if (!u.calls || !(u.promptTokens + u.completionTokens)) return; // no model call answered
    const line = document.createElement('div');
    line.className = 'oi-usage';
    line.textContent = usageText(u);
    line.title = 'Tokens as the provider counted them (else litellm\'s estimates); cost from litellm\'s price list when it knows the model';
    log.append(line);
    if (u.sessionCost !== undefined) showSessionCost(u.sessionCost);
}
