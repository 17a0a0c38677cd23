// Numbers for people: bytes, durations, rates.
export function bytes(n) {
  if (n == null || !Number.isFinite(n)) return '?';
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) (n /= 1000), i++;
  return `${n.toFixed(i === 0 || n >= 100 ? 0 : 1)} ${units[i]}`;
}

export function seconds(s) {
  if (!Number.isFinite(s)) return '?';
  if (s < 60) return `${Math.max(0, Math.round(s))} s`;
  const m = Math.floor(s / 60);
  return m < 60 ? `${m} min ${Math.round(s % 60)} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
}

export const rate = (x) => (Number.isFinite(x) ? `${x.toFixed(1)} tok/s` : '–');
