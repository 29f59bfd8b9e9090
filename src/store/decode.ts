/**
 * JSON text this store wrote, read back as the type it was written as: a meta hash field (`encodeFields`), an
 * element of the history, iteration or compacted lists, the blocks an `apply` reply carries. The one place the store
 * trusts what it reads, and the only one: these keys are the store's alone, written only from values of these types
 * (`JSON.stringify`), so they are not checked again on each read. Data from outside (requests, the Messages API) is
 * never read through here: it is parsed with its zod schema where it comes in.
 */
export function decodeStored<T>(text: string): T {
  return JSON.parse(text) as T;
}
