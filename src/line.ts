/** A line of `size` places: the first `size` enter at once, the others wait in arrival order. */
export class Line {
  private inside = 0;
  /** The waiting entries' callbacks, in arrival order (a Set keeps it, and drops a cancelled one in O(1)). */
  private readonly waiting = new Set<() => void>();
  constructor(private readonly size: number) {}

  /** True when a place was taken at once; else `go` is queued and called once a place is handed to it. */
  enter(go: () => void): boolean {
    if (this.inside < this.size) {
      this.inside++;
      return true;
    }
    this.waiting.add(go);
    return false;
  }

  /** Leaves the queue without a place (the waiting entry gave up). */
  cancel(go: () => void): void {
    this.waiting.delete(go);
  }

  /** Gives a place back: the first waiting entry gets it (the count of places held does not change then). */
  leave(): void {
    for (const next of this.waiting) {
      this.waiting.delete(next);
      next();
      return;
    }
    this.inside--;
  }

  get held(): number {
    return this.inside;
  }
  get queued(): number {
    return this.waiting.size;
  }
  get idle(): boolean {
    return this.inside === 0 && this.waiting.size === 0;
  }
}
